package main

// The embedded etcd: one member, its data under DIR/etcd, listening on loopback ports the kernel
// picks (port 0), so two control planes never race for a port.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts etcd and returns it with its client URL once it serves (also written to
// DIR/etcd-url).
func startEtcd(dir string) (*embed.Etcd, string, error) {
	cfg := embed.NewConfig()
	cfg.Name = "control-plane"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	// Test data only: skipping fsync keeps etcd from waiting on a slow shared disk.
	cfg.UnsafeNoFsync = true
	// Room for ledgers near their 1 MiB ConfigMap limit rewritten many times.
	cfg.QuotaBackendBytes = 8 << 30
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("etcd stopped while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd not ready after 60 s")
	}
	clientURL := "http://" + e.Clients[0].Addr().String()
	if err := os.WriteFile(filepath.Join(dir, "etcd-url"), []byte(clientURL+"\n"), 0o600); err != nil {
		e.Close()
		return nil, "", err
	}
	return e, clientURL, nil
}

// serveCompactionHook serves the tests' hook for compacting etcd's history, which is how a watch
// or a list from an old resourceVersion meets 410 Gone: POST /compact compacts everything before
// the current revision and answers {"revision": N}. It listens on a loopback port the kernel
// picks, written to DIR/hooks-url.
func serveCompactionHook(ctx context.Context, dir, etcdURL string) error {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		client.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		current, err := client.Get(r.Context(), "compact-hook")
		if err == nil {
			_, err = client.Compact(r.Context(), current.Header.Revision, clientv3.WithCompactPhysical())
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"revision": current.Header.Revision})
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = server.Close()
		client.Close()
	}()
	return os.WriteFile(filepath.Join(dir, "hooks-url"), []byte("http://"+ln.Addr().String()+"\n"), 0o600)
}
