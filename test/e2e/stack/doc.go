// Package stack brings up all of Cardinal on the test bed (package test/cluster), the way a user
// installs it, so that the end-to-end suite and `make demo` run the same thing:
//
//   - etcd and kube-apiserver on loopback;
//   - the Helm chart charts/cardinal installed with `helm install`, with values that point the
//     extender's urlPrefix and the webhook's clientConfig at loopback (and a CA bundle generated
//     here), so its ServiceAccounts, RBAC, ValidatingAdmissionPolicy, MutatingWebhookConfiguration
//     and scheduler ConfigMap are the real ones; its Deployments and DaemonSet stay inert (no
//     controller-manager runs; a test that needs Jobs starts one with only the controllers it
//     names, see cluster.StartControllerManager, and none of them acts on the chart's objects);
//   - the scheduler-extender and webhook binaries on the host, each with a token of the chart's
//     ServiceAccount for its component;
//   - kube-scheduler started with the KubeSchedulerConfiguration the chart rendered into its ConfigMap;
//   - one real kubelet per node of the simulated-NVML file, each with the device-plugin binary on
//     the host serving the kubelet's host-visible device-plugin folder, with a ServiceAccount token
//     bound to its Node (the node-name claim the chart's node-restriction policy checks).
//
// Binaries builds the three Cardinal binaries from the working tree.
package stack
