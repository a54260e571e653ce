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

{{/* Cloud credentials never as literals: an env entry whose name looks like a credential must use
valueFrom (a Secret), and the controller's config (a ConfigMap) must hold no credential key.
Credentials come from cloud.credentialsSecret, a secretKeyRef, or IRSA / RRSA annotations. */}}
{{- define "gpufleet.credentialPattern" -}}
(?i)(secret|access_?key|session_?token|security_?token|password|credential)
{{- end -}}
{{- define "gpufleet.checkEnv" -}}
{{- $pattern := include "gpufleet.credentialPattern" .root }}
{{- range .env }}
{{- if and (regexMatch $pattern (toString .name)) (hasKey . "value") }}
{{- fail (printf "%s: %s is a credential; take it from a Secret (valueFrom.secretKeyRef or cloud.credentialsSecret), never a literal value" $.where .name) }}
{{- end }}
{{- end }}
{{- end -}}
{{- define "gpufleet.checkConfig" -}}
{{- $pattern := include "gpufleet.credentialPattern" . }}
{{- if regexMatch (printf "(?m)^\\s*(-\\s+)?[A-Za-z_]*%s[A-Za-z_]*:" $pattern) (toYaml .Values.config) }}
{{- fail "config: holds a credential-like key; cloud credentials go in a Secret (cloud.credentialsSecret) or come from IRSA / RRSA, never the ConfigMap" }}
{{- end }}
{{- end -}}
