package stack

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// FailedScheduling returns the message of the latest FailedScheduling event of a pod (the reasons
// `kubectl describe pod` shows), or "" when there is none.
func FailedScheduling(ctx context.Context, client kubernetes.Interface, namespace, pod string) (string, error) {
	sel := fields.Set{"involvedObject.name": pod, "involvedObject.namespace": namespace, "reason": "FailedScheduling"}.AsSelector().String()
	events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return "", err
	}
	var latest *corev1.Event
	for i := range events.Items {
		ev := &events.Items[i]
		if latest == nil || eventTime(ev).After(eventTime(latest)) {
			latest = ev
		}
	}
	if latest == nil {
		return "", nil
	}
	return latest.Message, nil
}

func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}
