{{/*
The CEL of pkg/webhook's configurations (configuration.go), character for character: test/chart
compares the rendering with the package's. Each piece mirrors the Go function named with it.
*/}}

{{/* celList: a CEL list of string literals. Call with a list. */}}
{{- define "cardinal.webhook.celList" -}}
{{- if . -}}['{{ join "', '" . }}']{{- else -}}[]{{- end -}}
{{- end -}}

{{/* Refused device variables (pkg/webhook/env.go deviceVars): exact names, then prefixes. */}}
{{- define "cardinal.webhook.deviceEnvNames" -}}
{{- list "NVIDIA_VISIBLE_DEVICES" "CUDA_DEVICE_ORDER" "NVIDIA_IMEX_CHANNELS" "CUDA_DEVICE_MEMORY_SHARED_CACHE" "CUDA_DISABLE_CONTROL" "GPU_CORE_UTILIZATION_POLICY" "CUDA_TASK_PRIORITY" | toJson -}}
{{- end -}}
{{- define "cardinal.webhook.deviceEnvPrefixes" -}}
{{- list "NVIDIA_MIG_" "CUDA_DEVICE_MEMORY_LIMIT" "CUDA_DEVICE_SM_LIMIT" "CUDA_MPS_" | toJson -}}
{{- end -}}

{{/* celGPU, MIG resources (<domain of the gpu resource>/mig-…) included. Call with (dict "root" $ "obj" "object"). */}}
{{- define "cardinal.webhook.celGPU" -}}
{{- $res := include "cardinal.webhook.celList" (include "cardinal.resourceNameList" .root | fromJsonArray) -}}
{{- $mig := printf "%s/mig-" (splitList "/" .root.Values.resourceNames.gpu | first) -}}
{{- $container := printf "has(c.resources) && ((has(c.resources.limits) && (%[1]s.exists(r, r in c.resources.limits) || c.resources.limits.exists(r, r.startsWith('%[2]s')))) || (has(c.resources.requests) && (%[1]s.exists(r, r in c.resources.requests) || c.resources.requests.exists(r, r.startsWith('%[2]s')))))" $res $mig -}}
{{- printf "%[1]s.spec.containers.exists(c, %[2]s) || (has(%[1]s.spec.initContainers) && %[1]s.spec.initContainers.exists(c, %[2]s))" .obj $container -}}
{{- end -}}

{{/* celCarries. Call with the object's name. */}}
{{- define "cardinal.webhook.celCarries" -}}
{{- $internal := include "cardinal.webhook.celList" (list "cardinal.io/gpu-inventory" "cardinal.io/gpu-assignment" "cardinal.io/gpu-allocated") -}}
{{- printf "(has(%[1]s.metadata.annotations) && %[2]s.exists(k, k in %[1]s.metadata.annotations))" . $internal -}}
{{- end -}}

{{/* celChanged. Call with the list of keys. */}}
{{- define "cardinal.webhook.celChanged" -}}
{{- $in := "(has(%[1]s.metadata.annotations) && k in %[1]s.metadata.annotations)" -}}
{{- $new := printf $in "object" -}}
{{- $old := printf $in "oldObject" -}}
{{- printf "%[1]s.exists(k, %[2]s != %[3]s || (%[2]s && object.metadata.annotations[k] != oldObject.metadata.annotations[k]))" (include "cardinal.webhook.celList" .) $new $old -}}
{{- end -}}

{{/* celDeviceEnv. Call with (dict "root" $ "obj" "object"). */}}
{{- define "cardinal.webhook.celDeviceEnv" -}}
{{- $exact := include "cardinal.webhook.celList" (include "cardinal.webhook.deviceEnvNames" . | fromJsonArray) -}}
{{- $prefixes := include "cardinal.webhook.celList" (include "cardinal.webhook.deviceEnvPrefixes" . | fromJsonArray) -}}
{{- $env := printf "(has(c.env) && c.env.exists(e, e.name in %[1]s || %[2]s.exists(p, e.name.startsWith(p)))) || (has(c.envFrom) && c.envFrom.exists(f, has(f.prefix) && f.prefix != '' && (%[1]s.exists(n, n.startsWith(f.prefix)) || %[2]s.exists(p, p.startsWith(f.prefix) || f.prefix.startsWith(p)))))" $exact $prefixes -}}
{{- $out := printf "(%[1]s.spec.containers.exists(c, %[2]s) || (has(%[1]s.spec.initContainers) && %[1]s.spec.initContainers.exists(c, %[2]s)) || (has(%[1]s.spec.ephemeralContainers) && %[1]s.spec.ephemeralContainers.exists(c, %[2]s)))" .obj $env -}}
{{- with .root.Values.webhook.deviceEnvNamespaces -}}
{{- $out = printf "%s && !(request.namespace in %s)" $out (include "cardinal.webhook.celList" .) -}}
{{- end -}}
{{- printf "(%s)" $out -}}
{{- end -}}

{{/* The pod webhook's first matchCondition (podConditions). */}}
{{- define "cardinal.webhook.celPods" -}}
{{- $gpu := include "cardinal.webhook.celGPU" (dict "root" . "obj" "object") -}}
{{- $env := include "cardinal.webhook.celDeviceEnv" (dict "root" . "obj" "object") -}}
{{- $internal := include "cardinal.webhook.celChanged" (list "cardinal.io/gpu-inventory" "cardinal.io/gpu-assignment" "cardinal.io/gpu-allocated") -}}
{{- $user := include "cardinal.webhook.celChanged" (list "nvidia.com/use-gputype" "nvidia.com/nouse-gputype" "nvidia.com/use-gpuuuid" "nvidia.com/nouse-gpuuuid" "nvidia.com/numa-bind" "cardinal.io/node-policy" "cardinal.io/gpu-policy" "cardinal.io/gpu-link") -}}
{{- printf "request.operation == 'CREATE' ? (%[1]s || %[2]s || %[3]s) : (%[4]s || ((%[1]s) && %[5]s) || (request.subResource == 'ephemeralcontainers' && %[3]s))" $gpu (include "cardinal.webhook.celCarries" "object") $env $internal $user -}}
{{- end -}}

{{/* The CPU-only routing webhook's matchCondition (cpuPodsCondition). */}}
{{- define "cardinal.webhook.celCPUPods" -}}
{{- printf "!(%s) && (!has(object.spec.schedulerName) || object.spec.schedulerName == 'default-scheduler') && (!has(object.spec.nodeName) || object.spec.nodeName == '') && !(has(object.metadata.annotations) && 'kubernetes.io/config.mirror' in object.metadata.annotations) && !(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'DaemonSet'))" (include "cardinal.webhook.celGPU" (dict "root" . "obj" "object")) -}}
{{- end -}}

{{/* The workload webhook's matchCondition (workloadConditions). */}}
{{- define "cardinal.webhook.celWorkloads" -}}
{{- $tpl := "[has(%[1]s.spec.jobTemplate) ? %[1]s.spec.jobTemplate.spec.template : %[1]s.spec.template]" -}}
{{- printf "%[1]s.exists(t, (request.operation == 'CREATE' || %[2]s.exists(o, o != t)) && (%[3]s || (has(t.metadata) && %[4]s) || %[5]s))" (printf $tpl "object") (printf $tpl "oldObject") (include "cardinal.webhook.celGPU" (dict "root" . "obj" "t")) (include "cardinal.webhook.celCarries" "t") (include "cardinal.webhook.celDeviceEnv" (dict "root" . "obj" "t")) -}}
{{- end -}}

{{/* A matchCondition skipping users (bindingWebhook, BindingPolicy). Call with the list of users. */}}
{{- define "cardinal.webhook.celNotBy" -}}
!(request.userInfo.username in {{ include "cardinal.webhook.celList" . }})
{{- end -}}

{{/* BindingPolicy's validation of a Binding's metadata field: its expression, and (with "message") its
messageExpression. Call with (dict "field" "annotations") or (dict "field" "labels" "message" true). */}}
{{- define "cardinal.webhook.celBindingKeys" -}}
{{- $prefix := "cardinal.io/" -}}
{{- if .message -}}
{{- printf "'metadata.%[1]s: ' + object.metadata.%[1]s.filter(k, k.startsWith('%[2]s')).join(', ') + ': the metadata of a Binding is copied onto its pod (' + request.namespace + '/' + request.name + '), and %[2]s keys are written only by Cardinal; ' + request.userInfo.username + ' may not bind with them'" .field $prefix -}}
{{- else -}}
{{- printf "!has(object.metadata.%[1]s) || !object.metadata.%[1]s.exists(k, k.startsWith('%[2]s'))" .field $prefix -}}
{{- end -}}
{{- end -}}

{{/* webhook.clientConfig.url with its path replaced: call with (list $ "/path"). */}}
{{- define "cardinal.webhook.url" -}}
{{- $u := urlParse (index . 0).Values.webhook.clientConfig.url -}}
{{- $_ := set $u "path" (index . 1) -}}
{{- urlJoin $u -}}
{{- end -}}
