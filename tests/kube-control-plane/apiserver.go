package main

// kube-apiserver, started through its option structs as upstream's
// cmd/kube-apiserver/app/testing/testserver.go does: never through the cobra command, whose
// signal handler may be installed only once per process.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// serviceAccountIssuer is the issuer and audience of the tokens the apiserver signs.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// startAPIServer starts kube-apiserver on a loopback port the kernel picks and returns the port
// and a channel that carries its error if it stops.
func startAPIServer(ctx context.Context, dir string, creds *credentials, etcdURL, uncached string) (int, <-chan error, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, set := range s.Flags().FlagSets {
		fs.AddFlagSet(set)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port
	s.SecureServing.ServerCert.CertDirectory = filepath.Join(dir, "kube-apiserver")
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--tls-cert-file=" + creds.certFile,
		"--tls-private-key-file=" + creds.keyFile,
		"--client-ca-file=" + creds.caFile,
		"--token-auth-file=" + creds.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--api-audiences=" + serviceAccountIssuer,
		"--service-account-key-file=" + creds.saKeyFile,
		"--service-account-signing-key-file=" + creds.saKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--enable-admission-plugins=PodSecurity,NamespaceLifecycle,ServiceAccount,LimitRanger,ResourceQuota",
		// No advertised address and no endpoint reconciler: the server is on loopback only.
		"--endpoint-reconciler-type=none",
		"--shutdown-delay-duration=0s",
		"--profiling=false",
	}
	// Size 0 is how the apiserver turns its watch cache off for one resource (the only size it
	// still honours): watches and lists of it then go to etcd, whose compaction they meet.
	var sizes []string
	for _, resource := range strings.Split(uncached, ",") {
		if resource = strings.TrimSpace(resource); resource != "" {
			sizes = append(sizes, resource+"#0")
		}
	}
	if len(sizes) > 0 {
		args = append(args, "--watch-cache-sizes="+strings.Join(sizes, ","))
	}
	err = fs.Parse(args)
	if err != nil {
		ln.Close()
		return 0, nil, fmt.Errorf("kube-apiserver flags: %w", err)
	}
	s.SecureServing.ExternalAddress = net.ParseIP("127.0.0.1")
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		ln.Close()
		return 0, nil, fmt.Errorf("kube-apiserver feature gates: %w", err)
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		ln.Close()
		return 0, nil, fmt.Errorf("kube-apiserver options: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		ln.Close()
		return 0, nil, fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- app.Run(ctx, completed) }()
	return port, stopped, nil
}
