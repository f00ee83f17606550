{{/* The objects' base name: the release's, with "kvrouter" added unless it says so already. */}}
{{- define "kvrouter.fullname" -}}
{{- if contains "kvrouter" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kvrouter" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kvrouter.selectorLabels" -}}
app.kubernetes.io/name: kvrouter
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvrouter.labels" -}}
{{ include "kvrouter.selectorLabels" . }}
app.kubernetes.io/part-of: kvrouter
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The namespaces kvrouter watches pods in (selector mode). */}}
{{- define "kvrouter.namespaces" -}}
{{- toJson (.Values.discovery.namespaces | default (list .Release.Namespace)) -}}
{{- end -}}

{{/* Seconds of a whole-seconds duration such as "60s" ("0s" and "" are 0). */}}
{{- define "kvrouter.seconds" -}}
{{- $d := toString (. | default "0s") -}}
{{- if not (regexMatch "^[0-9]+s$" $d) -}}
{{- fail (printf "config.routing: %q: give the waits in whole seconds, such as 60s, so that the chart can keep the timeouts in front of kvrouter above them" $d) -}}
{{- end -}}
{{- trimSuffix "s" $d | int -}}
{{- end -}}

{{/* The longest a request may wait inside kvrouter before it is routed: the
     wait for a pod while the pool scales from zero, then kvrouter's queue. */}}
{{- define "kvrouter.longestWait" -}}
{{- $r := .Values.config.routing | default dict -}}
{{- add (include "kvrouter.seconds" $r.scale_from_zero_wait | int) (include "kvrouter.seconds" ($r.queue_max_wait | default "30s") | int) -}}
{{- end -}}

{{/* kvrouter's config file: .Values.config with what the chart's other
     values wire up. The keys the chart owns may not be set in config. */}}
{{- define "kvrouter.config" -}}
{{- $v := .Values -}}
{{- $user := deepCopy ($v.config | default dict) -}}
{{- range $key := list "listen" "discovery" -}}
{{- if hasKey $user $key -}}
{{- fail (printf "config.%s is set by the chart: use the chart's discovery and pool values (the ports are 9002 and 9090)" $key) -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey ($user.index | default dict) "backend") -}}
{{- fail "config.index.backend is set by the chart: use redis.enabled" -}}
{{- end -}}
{{- if hasKey ($user.extproc | default dict) "tls" -}}
{{- fail "config.extproc.tls is set by the chart: use tls.mode and tls.secretName" -}}
{{- end -}}
{{- $owned := dict "listen" (dict "grpc" ":9002" "admin" ":9090") -}}
{{- if $v.pool.name -}}
{{- $_ := set $owned "discovery" (dict "pool" (dict "name" $v.pool.name "namespace" .Release.Namespace)) -}}
{{- else -}}
{{- $_ := set $owned "discovery" (dict "selector" $v.discovery.selector "namespaces" (include "kvrouter.namespaces" . | fromJsonArray)) -}}
{{- end -}}
{{- $_ := set $owned "pods" (dict "default_model" $v.discovery.defaultModel) -}}
{{- $_ := set $owned "admin" (dict "auth" (ternary "auto" "none" $v.adminAuth)) -}}
{{- $tls := dict "mode" $v.tls.mode -}}
{{- if eq $v.tls.mode "secret" -}}
{{- $tls = dict "mode" "on" "cert_file" "/etc/kvrouter-tls/tls.crt" "key_file" "/etc/kvrouter-tls/tls.key" -}}
{{- end -}}
{{- $_ := set $owned "extproc" (dict "tls" $tls) -}}
{{- if $v.redis.enabled -}}
{{- $r := dict "address" ($v.redis.address | default (printf "%s-redis:6379" (include "kvrouter.fullname" .))) "cluster" $v.redis.cluster "tls" $v.redis.tls -}}
{{- if $v.redis.passwordSecret.name -}}
{{- $_ := set $r "password_file" "/etc/kvrouter-redis/password" -}}
{{- end -}}
{{- if $v.redis.deploy.enabled -}}
{{- /* The deployed server evicts by LFU under maxmemory: no TTL, one command per new block. */ -}}
{{- $_ := set $r "ttl" "0s" -}}
{{- end -}}
{{- $_ := set $owned "index" (dict "backend" "redis" "redis" $r) -}}
{{- end -}}
{{- $tok := dict -}}
{{- if $v.tokenizers.hfCache.enabled -}}
{{- $_ := set $tok "hf_cache" "/hf-cache" -}}
{{- end -}}
{{- if $v.tokenizers.chatTemplates -}}
{{- $models := dict -}}
{{- $i := 0 -}}
{{- range $model, $_ := $v.tokenizers.chatTemplates -}}
{{- $_ := set $models $model (dict "chat_template" (printf "/etc/kvrouter-templates/%s" (include "kvrouter.templateKey" $model))) -}}
{{- end -}}
{{- $_ := set $tok "models" $models -}}
{{- end -}}
{{- $_ := set $owned "tokenizers" $tok -}}
{{- toYaml (mustMergeOverwrite $user $owned) -}}
{{- end -}}

{{/* A model's chat template's key in the templates ConfigMap. */}}
{{- define "kvrouter.templateKey" -}}
{{- printf "%s.jinja" (regexReplaceAll "[^A-Za-z0-9._-]" . "_") -}}
{{- end -}}
