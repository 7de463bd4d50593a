{{/* The release's full name, cut to the 63 characters object names allow. */}}
{{- define "builder-monitor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "builder-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "builder-monitor.labels" -}}
{{ include "builder-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "builder-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "builder-monitor.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The body of one TOML table of the config: the lines after its `[name]` header up to the next
header, trimmed, comments kept. Called with (list configText "name").
*/}}
{{- define "builder-monitor.table" -}}
{{- $name := index . 1 -}}
{{- $current := "" -}}
{{- $lines := list -}}
{{- range splitList "\n" (index . 0) -}}
{{- $line := trim . -}}
{{- if regexMatch "^\\[\\[?\\s*[A-Za-z0-9_.\"-]+\\s*\\]\\]?\\s*(#.*)?$" $line -}}
{{- $current = regexReplaceAll "^\\[\\[?\\s*([A-Za-z0-9_.\"-]+)\\s*\\]\\]?.*$" $line "${1}" -}}
{{- else if eq $current $name -}}
{{- $lines = append $lines $line -}}
{{- end -}}
{{- end -}}
{{- join "\n" $lines -}}
{{- end -}}

{{/* A key's value in a table body, unquoted; empty when unset. Called with (list tableText "key"). */}}
{{- define "builder-monitor.key" -}}
{{- $key := index . 1 -}}
{{- $line := regexFind (printf "(?m)^%s\\s*=\\s*[^#\\n]*" $key) (index . 0) -}}
{{- regexReplaceAll (printf "^%s\\s*=\\s*" $key) $line "" | trim | trimAll "\"" -}}
{{- end -}}

{{/*
What the config asks of the cluster, as JSON: the keys the chart shapes the release by.
*/}}
{{- define "builder-monitor.features" -}}
{{- $config := .Values.config -}}
{{- $kube := include "builder-monitor.table" (list $config "kubernetes") -}}
{{- $monitor := include "builder-monitor.table" (list $config "monitor") -}}
{{- $runner := include "builder-monitor.table" (list $config "runner") -}}
{{- $kubeRunner := include "builder-monitor.table" (list $config "runner.kubernetes") -}}
{{- $server := include "builder-monitor.table" (list $config "server") -}}
{{- $listen := include "builder-monitor.key" (list $server "listen") -}}
{{- $runnerType := include "builder-monitor.key" (list $runner "type") | default "none" -}}
{{- $publish := eq (include "builder-monitor.key" (list $kube "publish")) "true" -}}
{{- dict
  "publish" $publish
  "prune" (and $publish (eq (include "builder-monitor.key" (list $kube "prune")) "true"))
  "leaderElection" (eq (include "builder-monitor.key" (list $kube "leader_election")) "true")
  "clusterState" (eq (include "builder-monitor.key" (list $monitor "state")) "kubernetes")
  "runner" $runnerType
  "buildNamespace" (include "builder-monitor.key" (list $kubeRunner "namespace") | default "default")
  "listen" $listen
  "port" (regexReplaceAll "^.*:" $listen "" | int)
  "kubeNamespaceSet" (ne (include "builder-monitor.key" (list $kube "namespace")) "")
  "kubeconfigSet" (ne (include "builder-monitor.key" (list $kube "kubeconfig")) "")
  | toJson -}}
{{- end -}}

{{/* Refuses configs the chart cannot run, saying what to change. */}}
{{- define "builder-monitor.validate" -}}
{{- $f := include "builder-monitor.features" . | fromJson -}}
{{- if not $f.listen -}}
{{- fail "values.config needs a [server] table with listen = \"0.0.0.0:<port>\": the probes, Service and metrics use it" -}}
{{- end -}}
{{- if or (hasPrefix "127." $f.listen) (hasPrefix "localhost" $f.listen) (hasPrefix "[::1]" $f.listen) -}}
{{- fail (printf "values.config [server] listen = %q only accepts connections from inside the pod; use \"0.0.0.0:%d\"" $f.listen (int $f.port)) -}}
{{- end -}}
{{- if or $f.kubeNamespaceSet $f.kubeconfigSet -}}
{{- fail "values.config: leave [kubernetes] namespace and kubeconfig unset; the daemon runs in the release namespace with its service account" -}}
{{- end -}}
{{- if and $f.leaderElection (gt (int .Values.replicaCount) 1) (not $f.clusterState) -}}
{{- fail "values.config: several replicas share one ledger only with [monitor] state = \"kubernetes\" (or set replicaCount: 1)" -}}
{{- end -}}
{{- $runnerTypes := list -}}
{{- range (.Files.Get "runners.yaml" | fromYaml).runners -}}
{{- $runnerTypes = append $runnerTypes .type -}}
{{- end -}}
{{- if not (has $f.runner $runnerTypes) -}}
{{- fail (printf "values.config: [runner] type = %q is not one of %s" $f.runner (join ", " $runnerTypes)) -}}
{{- end -}}
{{- end -}}
