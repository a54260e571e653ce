{{/* Object names: the release name when it already says gpufleet, else <release>-gpufleet. */}}
{{- define "gpufleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpufleet.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpufleet.labels" -}}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpufleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "gpufleet.controllerSA" -}}{{ include "gpufleet.fullname" . }}-controller{{- end -}}
{{- define "gpufleet.agentSA" -}}{{ include "gpufleet.fullname" . }}-agent{{- end -}}
{{- define "gpufleet.lease" -}}{{ include "gpufleet.fullname" . }}-scheduler{{- end -}}
