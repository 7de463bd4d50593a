// Package kpackbuildcheck checks the kpack Builds builder-monitor writes against kpack's own
// v1alpha2 Go types: each is decoded strictly (an unknown, duplicate or miscased field is
// refused, as the API server refuses it for a type it knows), then defaulted and validated as
// kpack's webhook does on create. kpack's CRDs preserve unknown fields, so the API server alone
// would accept and keep a field kpack then ignores.
//
// The Builds are the JSON files in the folder $KPACK_BUILDS (written by the Rust test
// tests/kubernetes/real_kpack.rs, which runs this through scripts/kpack-build-check).
package kpackbuildcheck

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pivotal/kpack/pkg/apis/build/v1alpha2"
	"sigs.k8s.io/json"
)

// check decodes one Build strictly and validates it; it returns what is wrong, or "".
func check(data []byte) string {
	var build v1alpha2.Build
	strict, err := json.UnmarshalStrict(data, &build)
	if err != nil {
		return "not a Build: " + err.Error()
	}
	if len(strict) > 0 {
		var all []string
		for _, e := range strict {
			all = append(all, e.Error())
		}
		return "kpack's v1alpha2 Build does not have: " + strings.Join(all, "; ")
	}
	if build.APIVersion != "kpack.io/v1alpha2" || build.Kind != "Build" {
		return "apiVersion/kind " + build.APIVersion + "/" + build.Kind + " is not kpack.io/v1alpha2 Build"
	}
	build.SetDefaults(context.Background())
	if invalid := build.Validate(context.Background()); invalid != nil {
		return "kpack's validation refuses it: " + invalid.Error()
	}
	return ""
}

func TestTheDaemonsBuildsAreKpackBuilds(t *testing.T) {
	dir := os.Getenv("KPACK_BUILDS")
	if dir == "" {
		t.Fatal("KPACK_BUILDS is not set: run this through scripts/kpack-build-check DIR")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Build (*.json) in %s: %v", dir, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if why := check(data); why != "" {
			t.Errorf("%s: %s", filepath.Base(file), why)
		}
	}
}

// The check can fail: a field kpack does not know, a miscased one, a Build without tags or source.
func TestTheCheckRefusesWhatKpackWouldNotRead(t *testing.T) {
	valid := `{"apiVersion":"kpack.io/v1alpha2","kind":"Build","metadata":{"name":"b"},` +
		`"spec":{"tags":["registry.example.com/app"],"builder":{"image":"registry.example.com/builder@sha256:` +
		strings.Repeat("a", 64) + `"},"source":{"git":{"url":"https://example.com/app.git","revision":"main"}}%s}}`
	for name, c := range map[string]struct {
		extra, want string
	}{
		"valid":    {"", ""},
		"unknown":  {`,"buildCache":true`, `unknown field "spec.buildCache"`},
		"miscased": {`,"ServiceAccountName":"x"`, `ServiceAccountName`},
	} {
		why := check([]byte(strings.Replace(valid, "%s", c.extra, 1)))
		if (c.want == "" && why != "") || (c.want != "" && !strings.Contains(why, c.want)) {
			t.Errorf("%s: got %q, want %q", name, why, c.want)
		}
	}
	for name, c := range map[string]struct{ build, want string }{
		"untagged":   {`{"builder":{"image":"b"},"source":{"git":{"url":"u","revision":"r"}}}`, "spec.tags"},
		"sourceless": {`{"tags":["registry.example.com/app"],"builder":{"image":"b"}}`, "spec.source"},
	} {
		build := `{"apiVersion":"kpack.io/v1alpha2","kind":"Build","metadata":{"name":"b"},"spec":` + c.build + `}`
		if why := check([]byte(build)); !strings.Contains(why, c.want) {
			t.Errorf("%s: got %q, want %q", name, why, c.want)
		}
	}
}
