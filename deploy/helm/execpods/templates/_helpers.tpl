{{/* Labels every object carries: kustomize's app.kubernetes.io/part-of, and Helm's own. */}}
{{- define "execpods.labels" -}}
app.kubernetes.io/part-of: execpods
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "execpods.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "execpods.tokenSecret" -}}
{{ .Values.token.existingSecret | default .Values.token.secretName }}
{{- end -}}

{{/* The Role of deploy/base/rbac.yaml (files/rbac.yaml is that file): its rules, one source. */}}
{{- define "execpods.roleRules" -}}
{{- range $doc := splitList "\n---\n" (.Files.Get "files/rbac.yaml") }}
{{- $object := fromYaml $doc }}
{{- if eq (get $object "kind") "Role" }}
{{- toYaml $object.rules }}
{{- end }}
{{- end }}
{{- end -}}
