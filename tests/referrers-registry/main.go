// Command referrers-registry is the tests' OCI registry with the OCI 1.1 referrers API
// (GET /v2/<name>/referrers/<digest>): go-containerregistry's pkg/registry with referrers support
// on, in memory, on a free loopback port. It prints "listening on 127.0.0.1:PORT" on stderr once
// it accepts connections, logs each request there, and stops when its standard input closes (the
// Rust tests hold it open: a test binary that dies cannot leave it behind).
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "referrers-registry: cannot listen on loopback: %v\n", err)
		os.Exit(1)
	}
	logger := log.New(os.Stderr, "", log.LstdFlags)
	handler := withLocation(registry.New(registry.WithReferrersSupport(true), registry.Logger(logger)))
	fmt.Fprintf(os.Stderr, "listening on %s\n", listener.Addr())
	go func() {
		// Any read error or EOF means the parent is gone.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if err := http.Serve(listener, handler); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "referrers-registry: %v\n", err)
		os.Exit(1)
	}
}

// withLocation adds the Location header the distribution spec gives a completed blob upload and a
// manifest PUT (201), which pkg/registry v0.22.1 omits and the tests' image pusher (the oci-client
// crate) requires: /v2/<name>/blobs/<digest>, /v2/<name>/manifests/<digest>.
func withLocation(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			next.ServeHTTP(w, r)
			return
		}
		if name, _, ok := strings.Cut(r.URL.Path, "/blobs/uploads/"); ok {
			next.ServeHTTP(&locating{ResponseWriter: w, prefix: name + "/blobs/"}, r)
			return
		}
		if name, _, ok := strings.Cut(r.URL.Path, "/manifests/"); ok {
			next.ServeHTTP(&locating{ResponseWriter: w, prefix: name + "/manifests/"}, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type locating struct {
	http.ResponseWriter
	prefix string
}

func (l *locating) WriteHeader(status int) {
	if digest := l.Header().Get("Docker-Content-Digest"); status == http.StatusCreated && digest != "" {
		l.Header().Set("Location", l.prefix+digest)
	}
	l.ResponseWriter.WriteHeader(status)
}
