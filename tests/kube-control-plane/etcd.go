package main

// The embedded etcd: one member, its data under DIR/etcd, listening on loopback ports the kernel
// picks (port 0), so two control planes never race for a port.

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts etcd and returns it with its client URL once it serves. The client URL is
// also written to DIR/etcd-url: etcd's JSON gateway there is the tests' hook for compacting
// history (POST /v3/kv/compaction), which is how a watch gets its 410 Gone.
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
