{{/* The webhook's certificates: webhook.certificates.mode is self-managed, helm or cert-manager. */}}

{{- define "cardinal.webhook.certMode" -}}{{ .Values.webhook.certificates.mode }}{{- end -}}

{{/* Secret the webhook manages itself ("self-managed"): CA, serving certificate, trust bundle. */}}
{{- define "cardinal.webhook.certsSecretName" -}}{{ include "cardinal.webhook.fullname" . }}-certs{{- end -}}

{{/* Secret holding the serving certificate the webhook reads from disk ("helm", "cert-manager"). */}}
{{- define "cardinal.webhook.tlsSecretName" -}}{{ include "cardinal.webhook.fullname" . }}-tls{{- end -}}

{{/* The DNS names of the Service, and the host of webhook.clientConfig.url when set: a JSON list. */}}
{{- define "cardinal.webhook.certHosts" -}}
{{- $svc := include "cardinal.webhook.serviceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- with .Values.webhook.clientConfig.url -}}
{{- $hosts = append $hosts (regexReplaceAll ":[0-9]+$" (urlParse .).host "" | trimPrefix "[" | trimSuffix "]") -}}
{{- end -}}
{{- toJson $hosts -}}
{{- end -}}

{{/*
The chart-generated CA and serving certificate ("helm" mode), as JSON {caCert, cert, key, caBundle}.
Generated once per render and kept in .Values so the Secret, the webhook configuration and the pod
checksum all see the same one. caBundle holds the new CA and, on upgrade, the CA of the Secret being
replaced, so pods still serving the old certificate stay trusted until they restart.
*/}}
{{- define "cardinal.webhook.generatedTLS" -}}
{{- if not (hasKey .Values "__cardinalGeneratedTLS") -}}
{{- $ns := .Release.Namespace -}}
{{- $days := int .Values.webhook.certificates.helm.validityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "cardinal.webhook.fullname" .)) $days -}}
{{- $dns := include "cardinal.webhook.certHosts" . | fromJsonArray -}}
{{- $cert := genSignedCert (index $dns 2) nil $dns $days $ca -}}
{{- $bundle := $ca.Cert -}}
{{- $old := lookup "v1" "Secret" $ns (include "cardinal.webhook.tlsSecretName" .) -}}
{{- if and $old $old.data (hasKey $old.data "ca.crt") -}}
{{- $oldCA := index $old.data "ca.crt" | b64dec -}}
{{- if ne $oldCA $ca.Cert -}}
{{- $bundle = printf "%s\n%s" (trimSuffix "\n" $ca.Cert) $oldCA -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "__cardinalGeneratedTLS" (dict "caCert" $ca.Cert "cert" $cert.Cert "key" $cert.Key "caBundle" $bundle) -}}
{{- end -}}
{{- get .Values "__cardinalGeneratedTLS" | toJson -}}
{{- end -}}

{{/* The caBundle line of a clientConfig, if the chart sets one (a url's, or "helm" mode's). */}}
{{- define "cardinal.webhook.caBundle" -}}
{{- $w := .Values.webhook -}}
{{- if $w.clientConfig.url -}}
{{- with $w.clientConfig.caBundle }}caBundle: {{ . }}{{ end -}}
{{- else if eq (include "cardinal.webhook.certMode" .) "helm" -}}
caBundle: {{ (include "cardinal.webhook.generatedTLS" . | fromJson).caBundle | b64enc }}
{{- end -}}
{{- end -}}
