{{/* The release's name, which names every object: <release> for one release per namespace. */}}
{{- define "tickd.fullname" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* The headless Service that gives each pod its DNS name for its peers. */}}
{{- define "tickd.peers" -}}
{{- printf "%s-peers" (include "tickd.fullname" .) -}}
{{- end -}}

{{- define "tickd.selectorLabels" -}}
app.kubernetes.io/name: tickd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tickd.labels" -}}
{{ include "tickd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Values.managedBy | default .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Node <id>'s host: the DNS name of pod <release>-<id - 1>, which /etc/hosts of that pod
     also holds, so a node resolves its own name before the cluster's DNS knows it. */}}
{{- define "tickd.host" -}}
{{- $ := index . 0 -}}
{{- $id := index . 1 -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "tickd.fullname" $) (sub $id 1) (include "tickd.peers" $) $.Release.Namespace $.Values.clusterDomain -}}
{{- end -}}

{{- define "tickd.credentialsSecret" -}}
{{- if .Values.credentials.existingSecret -}}
{{- .Values.credentials.existingSecret -}}
{{- else -}}
{{- printf "%s-credentials" (include "tickd.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "tickd.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}
