{{/*
Names. Objects are <fullname>-agent, <fullname>-server, ...: the fullname is cut to 45 characters so that the
longest suffix still leaves a valid 63-character DNS label.
*/}}
{{- define "gpufleet.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 45 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpufleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpufleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: gpufleet
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels of one part: (dict "root" $ "app" "agent" "component" "agent"). app names the program (the
name the standalone ServiceMonitor in deploy/monitoring selects: gpufleet-agent); component tells apart two
workloads of one program, whose selectors must not overlap.
*/}}
{{- define "gpufleet.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "gpufleet.name" .root) .app }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* The agent Service's selector and labels: every agent pod, with or without the workload watch. */}}
{{- define "gpufleet.agent.serviceLabels" -}}
{{ include "gpufleet.selectorLabels" (dict "root" . "app" "agent") }}
{{- end -}}

{{- define "gpufleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "gpufleet.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- .Values.agent.serviceAccount.name | default (printf "%s-agent" (include "gpufleet.fullname" .)) -}}
{{- else -}}
{{- .Values.agent.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The workload watch has its own account: the one that may list pods, events and Kueue objects. */}}
{{- define "gpufleet.watch.serviceAccountName" -}}
{{- printf "%s-agent-watch" (include "gpufleet.fullname" .) -}}
{{- end -}}

{{- define "gpufleet.server.serviceAccountName" -}}
{{- if .Values.server.serviceAccount.create -}}
{{- .Values.server.serviceAccount.name | default (printf "%s-server" (include "gpufleet.fullname" .)) -}}
{{- else -}}
{{- .Values.server.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Where the agents push: the value given, else this release's control-plane Service. */}}
{{- define "gpufleet.controlPlaneUrl" -}}
{{- if .Values.agent.controlPlane.url -}}
{{- .Values.agent.controlPlane.url -}}
{{- else -}}
{{- printf "%s://%s-server.%s.svc:%d" (ternary "https" "http" (not (empty .Values.server.tls.secretName))) (include "gpufleet.fullname" .) .Release.Namespace (int .Values.server.port) -}}
{{- end -}}
{{- end -}}

{{/*
The cost config both sides read (values cost): the ConfigMap holding it, "" when none is given (the catalog's prices).
*/}}
{{- define "gpufleet.cost.configMap" -}}
{{- if .Values.cost.existingConfigMap -}}
{{- .Values.cost.existingConfigMap -}}
{{- else if .Values.cost.config -}}
{{- printf "%s-cost" (include "gpufleet.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Where the agent finds it (--cost-config); the control plane reads it as $GPUFLEET_HOME/cost.yaml. */}}
{{- define "gpufleet.cost.dir" -}}/etc/gpufleet/cost{{- end -}}

{{/* A pod annotation that changes with the rendered cost config, so a new price rolls the pods that read it. */}}
{{- define "gpufleet.cost.checksum" -}}
{{- if and .Values.cost.config (not .Values.cost.existingConfigMap) -}}
checksum/cost: {{ toYaml .Values.cost.config | sha256sum }}
{{- end -}}
{{- end -}}

{{/*
Combinations the schema cannot express, refused with what to change. Rendered once, from validate.yaml.
*/}}
{{- define "gpufleet.validate" -}}
{{- $server := .Values.server -}}
{{- if $server.enabled -}}
{{- if and (gt (int $server.replicas) 1) (not $server.postgresql.enabled) -}}
{{- fail (printf "server.replicas is %d but server.postgresql.enabled is false: replicas share their state only through PostgreSQL. Set server.postgresql.enabled=true with server.postgresql.existingSecret naming a Secret that holds the DSN, or set server.replicas=1" (int $server.replicas)) -}}
{{- end -}}
{{- if and $server.postgresql.enabled (not $server.postgresql.existingSecret) -}}
{{- fail "server.postgresql.enabled is true but server.postgresql.existingSecret is empty: name the Secret that holds the PostgreSQL DSN (kubectl create secret generic gpufleet-postgresql --from-literal=dsn=postgresql://...)" -}}
{{- end -}}
{{- if and $server.persistence.enabled (gt (int $server.replicas) 1) (not $server.persistence.existingClaim) -}}
{{- fail (printf "server.persistence.enabled needs server.replicas=1 (a ReadWriteOnce claim holds one replica's data directory), not %d: turn persistence off and keep the state in PostgreSQL" (int $server.replicas)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.cost.config .Values.cost.existingConfigMap -}}
{{- fail (printf "cost.config and cost.existingConfigMap (%s) are both set: give the cost config in one place, inline in cost.config or in your own ConfigMap" .Values.cost.existingConfigMap) -}}
{{- end -}}
{{- $preflight := .Values.preflight -}}
{{- if $preflight.enabled -}}
{{- if not $server.enabled -}}
{{- fail "preflight.enabled needs server.enabled: the control plane serves the preflight webhook" -}}
{{- end -}}
{{- if not $server.tls.secretName -}}
{{- fail "preflight.enabled needs server.tls.secretName: the API server calls webhooks over HTTPS only. Name the Secret the control plane's certificate is in (e.g. gpufleet-server-tls); with preflight.certificate cert-manager or self-signed this chart writes it" -}}
{{- end -}}
{{- if and (eq $preflight.certificate "existing") (not $preflight.caBundle) (not $preflight.certManagerCertificate) -}}
{{- fail "preflight.certificate is existing but neither preflight.caBundle nor preflight.certManagerCertificate is set: the API server needs the CA that signed the control plane's certificate" -}}
{{- end -}}
{{- end -}}
{{- $agent := .Values.agent -}}
{{- if $agent.enabled -}}
{{- if and $agent.controlPlane.enabled (not $agent.token.existingSecret) -}}
{{- fail "agent.controlPlane.enabled is true but agent.token.existingSecret is empty: name the Secret holding an agent token (gpufleet token create --role agent), or set agent.controlPlane.enabled=false for /metrics only" -}}
{{- end -}}
{{- if and $agent.controlPlane.enabled (not $agent.controlPlane.url) (not $server.enabled) -}}
{{- fail "agent.controlPlane.url is empty and server.enabled is false: give the control plane's URL the agents push to" -}}
{{- end -}}
{{- if and $agent.workloadWatch.enabled (not $agent.controlPlane.enabled) -}}
{{- fail "agent.workloadWatch.enabled reports to the control plane: set agent.controlPlane.enabled=true too" -}}
{{- end -}}
{{- end -}}
{{- end -}}
