{{/* The release's resource names and labels. */}}
{{- define "walrelay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "walrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walrelay.labels" -}}
{{ include "walrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "walrelay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "walrelay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "walrelay.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The configuration must not carry a password (a ConfigMap is readable by anyone who may read
the namespace's configuration, and the release history keeps it): refused at render time.
*/}}
{{- define "walrelay.checkConfig" -}}
{{- if regexMatch "(?m)^\\s*password\\s*=" .Values.config -}}
{{- fail "config: a `password = ...` line: put the password in the Secret of existingSecret (passwordKey), not in walrelay.toml" -}}
{{- end -}}
{{- if regexMatch "password\\s*=\\s*[^\\s\"]" .Values.config -}}
{{- fail "config: a connection string with password=...: put the password in the Secret of existingSecret (passwordKey), not in walrelay.toml" -}}
{{- end -}}
{{- if regexMatch "(?m)^\\s*metrics_address\\s*=" .Values.config -}}
{{- fail "config: ops.metrics_address is set by the chart (0.0.0.0 on metrics.port): leave it out" -}}
{{- end -}}
{{- if and .Values.existingSecret.passwordKey (not .Values.existingSecret.name) -}}
{{- fail "existingSecret.passwordKey without existingSecret.name" -}}
{{- end -}}
{{- if and .Values.existingSecret.kafkaPropertiesKey (not .Values.existingSecret.name) -}}
{{- fail "existingSecret.kafkaPropertiesKey without existingSecret.name" -}}
{{- end -}}
{{- end -}}

{{/* The environment of the relay and of the setup Job: passwords from the Secret. */}}
{{- define "walrelay.env" -}}
- name: WALRELAY_OPS_METRICS_ADDRESS
  value: {{ printf "0.0.0.0:%d" (int .Values.metrics.port) | quote }}
{{- if .Values.existingSecret.passwordKey }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.existingSecret.name }}
      key: {{ .Values.existingSecret.passwordKey }}
{{- end }}
{{- if .Values.existingSecret.kafkaPropertiesKey }}
- name: WALRELAY_KAFKA_PROPERTIES_FILE
  value: /etc/walrelay/secret/kafka.properties
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "walrelay.volumeMounts" -}}
- name: config
  mountPath: /etc/walrelay/walrelay.toml
  subPath: walrelay.toml
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.existingSecret.kafkaPropertiesKey }}
- name: secret
  mountPath: /etc/walrelay/secret
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes; called with (dict "ctx" $ "configMap" NAME): the relays' ConfigMap, or the
setup Job's own (a pre-install hook runs before the release's ConfigMap exists). */}}
{{- define "walrelay.volumes" -}}
{{- $ := .ctx -}}
- name: config
  configMap:
    name: {{ .configMap }}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if $.Values.existingSecret.kafkaPropertiesKey }}
- name: secret
  secret:
    secretName: {{ $.Values.existingSecret.name }}
    defaultMode: 0440
    items:
      - key: {{ $.Values.existingSecret.kafkaPropertiesKey }}
        path: kafka.properties
{{- end }}
{{- end -}}
