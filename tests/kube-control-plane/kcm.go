package main

// kube-controller-manager, started through its option structs as upstream's
// cmd/kube-controller-manager/app/testing/testserver.go does.

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// controllers are the workload controllers the tests meet, by their canonical names. Node
// lifecycle is left out on purpose: with no kubelet heartbeats it would taint and evict the
// node agent's Node; the service-account token controller needs a private key it has no use for.
var controllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"job-controller",
	"statefulset-controller",
	"daemonset-controller",
	"cronjob-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"ttl-after-finished-controller",
	"root-ca-certificate-publisher-controller",
	"resourcequota-controller",
}

// startControllerManager runs the controllers with the admin kubeconfig; each controller gets
// its own service-account token by TokenRequest, as in a real cluster.
func startControllerManager(ctx context.Context, creds *credentials) (<-chan error, error) {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, err
	}
	all, disabled, aliases := kcm.KnownControllers(), kcm.ControllersDisabledByDefault(), kcm.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, set := range named.FlagSets {
		fs.AddFlagSet(set)
	}
	err = fs.Parse([]string{
		"--kubeconfig=" + creds.kubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--root-ca-file=" + creds.caFile,
		"--controllers=" + strings.Join(controllers, ","),
	})
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-controller-manager feature gates: %w", err)
	}
	config, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- kcm.Run(ctx, config.Complete()) }()
	return stopped, nil
}
