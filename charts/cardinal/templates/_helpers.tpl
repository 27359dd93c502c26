{{/* Names, labels and small shared pieces. */}}

{{- define "cardinal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name; kept short enough for "<fullname>-device-plugin" to fit 63 characters. */}}
{{- define "cardinal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cardinal.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. Call with (dict "root" $ "component" "webhook"). */}}
{{- define "cardinal.labels" -}}
helm.sh/chart: {{ include "cardinal.chart" .root }}
{{ include "cardinal.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: cardinal
{{- end -}}

{{/* Labels that select a component's pods. Call with (dict "root" $ "component" "webhook"). */}}
{{- define "cardinal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cardinal.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference. Call with (dict "root" $ "image" .Values.webhook.image). */}}
{{- define "cardinal.image" -}}
{{- $tag := .image.tag | default .root.Values.imageTag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{- define "cardinal.scheduler.fullname" -}}{{ include "cardinal.fullname" . }}-scheduler{{- end -}}
{{- define "cardinal.webhook.fullname" -}}{{ include "cardinal.fullname" . }}-webhook{{- end -}}
{{- define "cardinal.devicePlugin.fullname" -}}{{ include "cardinal.fullname" . }}-device-plugin{{- end -}}

{{- define "cardinal.scheduler.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create -}}
{{- default (include "cardinal.scheduler.fullname" .) .Values.scheduler.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.scheduler.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cardinal.webhook.serviceAccountName" -}}
{{- if .Values.webhook.serviceAccount.create -}}
{{- default (include "cardinal.webhook.fullname" .) .Values.webhook.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.webhook.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cardinal.devicePlugin.serviceAccountName" -}}
{{- if .Values.devicePlugin.serviceAccount.create -}}
{{- default (include "cardinal.devicePlugin.fullname" .) .Values.devicePlugin.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.devicePlugin.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Username of a ServiceAccount of this release: call with (list $ "<name>"). */}}
{{- define "cardinal.saUser" -}}
{{- printf "system:serviceaccount:%s:%s" (index . 0).Release.Namespace (index . 1) -}}
{{- end -}}

{{/* The four managed resource names, GPU first, as a JSON list (fromJsonArray to use). */}}
{{- define "cardinal.resourceNameList" -}}
{{- $r := .Values.resourceNames -}}
{{- list $r.gpu $r.gpumem $r.gpumemPercentage $r.gpucores | toJson -}}
{{- end -}}

{{/* --resource-* flags every Cardinal binary takes, then --v and --log-format, as YAML list items. */}}
{{- define "cardinal.commonArgs" -}}
- --resource-gpu={{ .Values.resourceNames.gpu }}
- --resource-gpumem={{ .Values.resourceNames.gpumem }}
- --resource-gpumem-percentage={{ .Values.resourceNames.gpumemPercentage }}
- --resource-gpucores={{ .Values.resourceNames.gpucores }}
- --v={{ .Values.log.verbosity }}
- --log-format={{ .Values.log.format }}
{{- end -}}

{{/* Service name of the webhook. */}}
{{- define "cardinal.webhook.serviceName" -}}{{ include "cardinal.webhook.fullname" . }}{{- end -}}

{{/* Comma list for --trusted-service-accounts: the scheduler's and the device plugin's, then extras. */}}
{{- define "cardinal.webhook.trustedServiceAccounts" -}}
{{- $sas := list (include "cardinal.saUser" (list . (include "cardinal.scheduler.serviceAccountName" .))) -}}
{{- if .Values.devicePlugin.enabled -}}
{{- $sas = append $sas (include "cardinal.saUser" (list . (include "cardinal.devicePlugin.serviceAccountName" .))) -}}
{{- end -}}
{{- concat $sas .Values.webhook.trustedServiceAccounts | uniq | join "," -}}
{{- end -}}
