// Command kube-control-plane is a real Kubernetes control plane for builder-monitor's tests, in
// one process: embedded etcd, kube-apiserver and kube-controller-manager as libraries of
// k8s.io/kubernetes v1.37.2, a stand-in node agent, and the kpack and Kueue CRDs. Once it is
// ready it prints the path of an admin kubeconfig as its first line on stdout; it stops on
// SIGTERM or SIGINT (and, with --stop-on-stdin-eof, when its standard input closes, so that a
// test binary that dies never leaves it behind). Start it with scripts/control-plane; README.md
// beside this file says what a test can ask of it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	logsapi "k8s.io/component-base/logs/api/v1"
)

func init() {
	// As both upstream test servers do: the apiserver and the controller manager each apply the
	// logging configuration, and the second application must not fail.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

var started = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kube-control-plane: %5.1fs "+format+"\n",
		append([]any{time.Since(started).Seconds()}, args...)...)
}

func main() {
	dir := flag.String("dir", "", "folder for all state: etcd's data, certificates, the kubeconfig")
	kueue := flag.String("kueue-module", "", "folder of the sigs.k8s.io/kueue module (its CRDs are installed)")
	kpack := flag.String("kpack-module", "", "folder of the github.com/pivotal/kpack module (its CRDs are installed)")
	stopOnEOF := flag.Bool("stop-on-stdin-eof", false, "also stop when standard input reaches its end")
	removeDir := flag.Bool("remove-dir", false, "remove DIR after a clean stop (its state is disposable)")
	uncached := flag.String("no-watch-cache", "", "comma-separated resources (`configmaps`, `jobs.batch`) the apiserver serves "+
		"watches and lists of from etcd, not its watch cache: after the compaction hook, a watch from an older "+
		"resourceVersion of these gets 410 Gone")
	flag.Parse()
	if *dir == "" || *kueue == "" || *kpack == "" {
		fmt.Fprintln(os.Stderr, "usage: kube-control-plane --dir DIR --kueue-module DIR --kpack-module DIR [--stop-on-stdin-eof]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *stopOnEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	if err := run(ctx, *dir, *kueue, *kpack, *uncached); err != nil && !errors.Is(err, context.Canceled) {
		progress("failed: %v", err)
		os.Exit(1)
	}
	if *removeDir {
		if err := os.RemoveAll(*dir); err != nil {
			progress("could not remove %s: %v", *dir, err)
		}
	}
}

// run starts everything, announces the kubeconfig and serves until ctx ends; then it stops
// everything within 10 s.
func run(ctx context.Context, dir, kueue, kpack, uncached string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	crds, err := readCRDs([]crdSource{
		{module: kueue, glob: "config/components/crd/bases/*.yaml"},
		{module: kpack, glob: "config/*.yaml", dropConversion: true},
	})
	if err != nil {
		return err
	}
	creds, err := makeCredentials(dir)
	if err != nil {
		return err
	}
	etcd, etcdURL, err := startEtcd(dir)
	if err != nil {
		return err
	}
	progress("etcd ready at %s", etcdURL)

	serverCtx, stopServers := context.WithCancel(ctx)
	apiserverStopped := make(chan error, 1)
	defer func() {
		// Stop within 10 s whatever hangs: the servers get 7, then the process ends.
		watchdog := time.AfterFunc(9*time.Second, func() { os.Exit(1) })
		defer watchdog.Stop()
		stopServers()
		select {
		case <-apiserverStopped:
		case <-time.After(7 * time.Second):
		}
		etcd.Close()
		progress("stopped")
	}()

	if err := serveCompactionHook(serverCtx, dir, etcdURL); err != nil {
		return err
	}
	port, apiErr, err := startAPIServer(serverCtx, dir, creds, etcdURL, uncached)
	if err != nil {
		return err
	}
	go func() { apiserverStopped <- <-apiErr }()
	config, err := writeKubeconfig(creds, port)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if err := waitReady(serverCtx, client, apiserverStopped); err != nil {
		return err
	}
	progress("kube-apiserver ready at https://127.0.0.1:%d", port)
	kcmStopped, err := startControllerManager(serverCtx, creds)
	if err != nil {
		return err
	}
	if err := runNodeAgent(serverCtx, client); err != nil {
		return err
	}
	if err := installCRDs(serverCtx, config, crds); err != nil {
		return err
	}
	progress("%d CRDs Established", len(crds))
	if err := waitDefaultServiceAccount(serverCtx, client); err != nil {
		return err
	}
	progress("ready")
	fmt.Println(creds.kubeconfigPath)

	select {
	case <-ctx.Done():
		return nil
	case err := <-apiserverStopped:
		return fmt.Errorf("kube-apiserver stopped: %v", err)
	case err := <-kcmStopped:
		return fmt.Errorf("kube-controller-manager stopped: %v", err)
	}
}

// writeKubeconfig writes the admin kubeconfig: the CA inline and a bearer token.
func writeKubeconfig(creds *credentials, port int) (*rest.Config, error) {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["control-plane"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d", port),
		CertificateAuthorityData: creds.caPEM,
	}
	kubeconfig.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: creds.adminToken}
	kubeconfig.Contexts["admin"] = &clientcmdapi.Context{Cluster: "control-plane", AuthInfo: "admin", Namespace: "default"}
	kubeconfig.CurrentContext = "admin"
	if err := clientcmd.WriteToFile(*kubeconfig, creds.kubeconfigPath); err != nil {
		return nil, err
	}
	if err := os.Chmod(creds.kubeconfigPath, 0o600); err != nil {
		return nil, err
	}
	config, err := clientcmd.BuildConfigFromFlags("", creds.kubeconfigPath)
	if err != nil {
		return nil, err
	}
	config.QPS, config.Burst = 200, 400
	return config, nil
}

// waitReady waits until /readyz answers 200.
func waitReady(ctx context.Context, client kubernetes.Interface, stopped <-chan error) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 120*time.Second, true,
		func(ctx context.Context) (bool, error) {
			select {
			case err := <-stopped:
				return false, fmt.Errorf("kube-apiserver stopped while starting: %v", err)
			default:
			}
			status := 0
			client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
			return status == 200, nil
		})
}

// waitDefaultServiceAccount waits for the serviceaccount controller's first work: until it is
// there, pods in `default` are refused.
func waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 120*time.Second, true,
		func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		})
}
