{{/*
Names, labels and the pieces of the pod spec shared by several templates.
*/}}

{{- define "querator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name. Kept to 52 characters: a StatefulSet adds a revision hash label of
"<name>-<10 characters>" to its pods, which must fit 63.
*/}}
{{- define "querator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service: each pod's stable DNS name, <pod>.<this>.<namespace>.svc.<domain>. */}}
{{- define "querator.headlessName" -}}
{{- printf "%s-headless" (include "querator.fullname" .) }}
{{- end }}

{{/*
The Host names a node without API keys answers (DNS rebinding): the client Service's names in the
cluster, every pod's through the headless Service, the ingress hosts and querator.allowedHosts. Not
"<service>.<namespace>": its last label could be a public domain (a namespace named "dev").
*/}}
{{- define "querator.allowedHosts" -}}
{{- $fullname := include "querator.fullname" . }}
{{- $svc := printf "%s.svc" .Release.Namespace }}
{{- $hosts := list (printf "%s.%s" $fullname $svc) (printf "%s.%s.%s" $fullname $svc .Values.clusterDomain) }}
{{- $hosts = append $hosts (printf ".%s.%s.%s" (include "querator.headlessName" .) $svc .Values.clusterDomain) }}
{{- if .Values.ingress.enabled }}
{{- range .Values.ingress.hosts }}
{{- $hosts = append $hosts .host }}
{{- end }}
{{- end }}
{{- concat $hosts .Values.querator.allowedHosts | join "," }}
{{- end }}

{{- define "querator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object of the release carries, without the component. */}}
{{- define "querator.commonLabels" -}}
helm.sh/chart: {{ include "querator.chart" . }}
app.kubernetes.io/name: {{ include "querator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: querator
{{- end }}

{{/*
Selects the Querator nodes. The component is part of it so that the helm test pod, which shares the
name and instance, is never behind a Service or counted by the PodDisruptionBudget.
*/}}
{{- define "querator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "querator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{- define "querator.labels" -}}
{{ include "querator.commonLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{- define "querator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "querator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "querator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The --cluster setting: etcd://host:port[,host:port]/prefix. */}}
{{- define "querator.etcdCluster" -}}
{{- printf "etcd://%s%s" (join "," .Values.cluster.etcd.endpoints) .Values.cluster.etcd.prefix }}
{{- end }}

{{/* The client Service's in-cluster URL. */}}
{{- define "querator.endpoint" -}}
{{- printf "%s://%s.%s.svc.%s:%d" (ternary "https" "http" (not (empty .Values.tls.existingSecret))) (include "querator.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.service.port) }}
{{- end }}

{{/* Where the Secrets the pods read as files are mounted. */}}
{{- define "querator.apiKeysDir" -}}/etc/querator/api-keys{{- end }}
{{- define "querator.clusterSecretDir" -}}/etc/querator/cluster-secret{{- end }}
{{- define "querator.cassandraCaDir" -}}/etc/querator/cassandra-ca{{- end }}
{{- define "querator.postgresCaDir" -}}/etc/querator/postgres-ca{{- end }}
{{- define "querator.tlsDir" -}}/etc/querator/tls{{- end }}
{{- define "querator.tlsCaDir" -}}/etc/querator/tls-ca{{- end }}
{{- define "querator.etcdCaDir" -}}/etc/querator/etcd-ca{{- end }}
{{- define "querator.etcdClientDir" -}}/etc/querator/etcd-client{{- end }}
{{- define "querator.etcdAuthDir" -}}/etc/querator/etcd-auth{{- end }}

{{/*
Combinations of values that values.schema.json cannot express (they compare two values); each fails
the render with a message naming the values.
*/}}
{{- define "querator.validate" -}}
{{- if eq (int .Values.querator.port) (int .Values.querator.adminPort) }}
{{- fail "querator.port and querator.adminPort must differ: the API and the probes listen apart" }}
{{- end }}
{{- if and .Values.apiKeys.existingSecret (not .Values.cluster.secret.existingSecret) }}
{{- fail "cluster.secret.existingSecret is required with apiKeys: the nodes authenticate the requests they forward to each other with it" }}
{{- end }}
{{- if and .Values.tenancy.enabled (not .Values.cluster.secret.existingSecret) }}
{{- fail "cluster.secret.existingSecret is required with tenancy: the nodes authenticate the requests they forward to each other with it" }}
{{- end }}
{{- if and .Values.tls.mutual (not .Values.tls.caSecret) }}
{{- fail "tls.caSecret is required with tls.mutual: the nodes verify each other's client certificates against it" }}
{{- end }}
{{- if and (or .Values.tls.mutual .Values.tls.caSecret) (not .Values.tls.existingSecret) }}
{{- fail "tls.existingSecret is required with tls.caSecret or tls.mutual: nodes verify each other only over HTTPS" }}
{{- end }}
{{- $etcdTls := .Values.cluster.etcd.tls }}
{{- if and $etcdTls.enabled (not $etcdTls.caSecret) }}
{{- fail "cluster.etcd.tls.caSecret is required with cluster.etcd.tls.enabled" }}
{{- end }}
{{- if and $etcdTls.clientSecret (not $etcdTls.enabled) }}
{{- fail "cluster.etcd.tls.enabled is required with cluster.etcd.tls.clientSecret" }}
{{- end }}
{{- $postgres := .Values.storage.postgres }}
{{- if and (eq .Values.storage.backend "postgres") (not $postgres.existingSecret) }}
{{- fail "storage.postgres.existingSecret is required with storage.backend postgres: the nodes read the connection URL (which may hold a password) from that Secret's storage.postgres.urlKey, never from values" }}
{{- end }}
{{- $processes := int .Values.querator.processes }}
{{- if and (gt $processes 1) (not (has .Values.storage.backend (list "cassandra" "postgres"))) }}
{{- fail "querator.processes above 1 needs storage.backend cassandra or postgres: each process is a cluster member of its own, and only those stores are shared by them all" }}
{{- end }}
{{- $last := add .Values.querator.processPortBase $processes -1 }}
{{- if and (gt $processes 1) (gt (int $last) 65535) }}
{{- fail "querator.processPortBase + querator.processes - 1 must be a port up to 65535" }}
{{- end }}
{{- range $port := list .Values.querator.port .Values.querator.adminPort }}
{{- if and (gt $processes 1) (ge (int $port) (int $.Values.querator.processPortBase)) (le (int $port) (int $last)) }}
{{- fail "querator.port and querator.adminPort must lie outside the process ports (querator.processPortBase to processPortBase + processes - 1)" }}
{{- end }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int .Values.preStopSleepSeconds) }}
{{- fail "terminationGracePeriodSeconds must be greater than preStopSleepSeconds: the node needs time to leave the cluster after the preStop wait" }}
{{- end }}
{{- end }}

{{/*
The TLS, etcd and PostgreSQL CA Secrets the pods mount, as YAML: volume name -> {secret, keys, dir}.
One list feeds the volumes and the mounts, so they cannot disagree.
*/}}
{{- define "querator.secretVolumes" -}}
{{- with .Values.tls }}
{{- if .existingSecret }}
tls: {secret: {{ .existingSecret }}, keys: [{{ .certKey }}, {{ .keyKey }}], dir: {{ include "querator.tlsDir" $ }}}
{{- end }}
{{- if .caSecret }}
tls-ca: {secret: {{ .caSecret }}, keys: [{{ .caKey }}], dir: {{ include "querator.tlsCaDir" $ }}}
{{- end }}
{{- end }}
{{- with .Values.cluster.etcd.tls }}
{{- if .enabled }}
etcd-ca: {secret: {{ .caSecret }}, keys: [{{ .caKey }}], dir: {{ include "querator.etcdCaDir" $ }}}
{{- end }}
{{- if .clientSecret }}
etcd-client: {secret: {{ .clientSecret }}, keys: [{{ .certKey }}, {{ .keyKey }}], dir: {{ include "querator.etcdClientDir" $ }}}
{{- end }}
{{- end }}
{{- with .Values.storage.postgres.tls }}
{{- if and (eq $.Values.storage.backend "postgres") .enabled }}
postgres-ca: {secret: {{ .caSecret }}, keys: [{{ .caKey }}], dir: {{ include "querator.postgresCaDir" $ }}}
{{- end }}
{{- end }}
{{- with .Values.cluster.etcd.auth }}
{{- if .existingSecret }}
etcd-auth: {secret: {{ .existingSecret }}, keys: [{{ .passwordKey }}], dir: {{ include "querator.etcdAuthDir" $ }}}
{{- end }}
{{- end }}
{{- end }}

{{- define "querator.secretDirs" -}}
{{- range $name, $volume := (include "querator.secretVolumes" . | fromYaml) }}
{{ $name }}: {{ $volume.dir }}
{{- end }}
{{- end }}

{{/*
The ports of a pod's processes (querator.processes above 1), comma-separated: processPortBase,
processPortBase + 1, ...
*/}}
{{- define "querator.processPorts" -}}
{{- $ports := list }}
{{- range $i := until (int .Values.querator.processes) }}
{{- $ports = append $ports (add $.Values.querator.processPortBase $i) }}
{{- end }}
{{- join "," $ports }}
{{- end }}
