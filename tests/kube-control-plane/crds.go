package main

// The CRDs of kpack and Kueue, read at start from their released modules (a folder of the Go
// module cache that scripts/control-plane names), installed as released and waited on until
// Established. Their controllers do not run: tests write the status those would write.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// crdSource is where one project keeps its CRDs inside its module.
type crdSource struct {
	module string // the module's folder
	glob   string // the CRD files, relative to it
	// dropConversion removes spec.conversion: kpack's name a webhook that does not run here.
	dropConversion bool
}

var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// readCRDs returns every CustomResourceDefinition document of the sources' files.
func readCRDs(sources []crdSource) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, source := range sources {
		files, err := filepath.Glob(filepath.Join(source.module, source.glob))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no CRD files %s in %s", source.glob, source.module)
		}
		sort.Strings(files)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			for _, doc := range documentSeparator.Split(string(data), -1) {
				var meta metav1.TypeMeta
				if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
					return nil, fmt.Errorf("%s: %w", file, err)
				}
				if meta.Kind != "CustomResourceDefinition" {
					continue
				}
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if err := yaml.Unmarshal(bytes.TrimSpace([]byte(doc)), crd); err != nil {
					return nil, fmt.Errorf("%s: %w", file, err)
				}
				if source.dropConversion {
					crd.Spec.Conversion = nil
				}
				crds = append(crds, crd)
			}
		}
	}
	return crds, nil
}

// installCRDs creates the CRDs (or brings them back to the released spec when DIR held them
// from an earlier run) and waits until each is Established.
func installCRDs(ctx context.Context, config *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	client, err := apiextensions.NewForConfig(config)
	if err != nil {
		return err
	}
	api := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		_, err := api.Create(ctx, crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var existing *apiextensionsv1.CustomResourceDefinition
			existing, err = api.Get(ctx, crd.Name, metav1.GetOptions{})
			if err == nil {
				existing.Spec = crd.Spec
				_, err = api.Update(ctx, existing, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", crd.Name, err)
		}
	}
	for _, crd := range crds {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true,
			func(ctx context.Context) (bool, error) {
				got, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				for _, c := range got.Status.Conditions {
					if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
						return true, nil
					}
				}
				return false, nil
			})
		if err != nil {
			return fmt.Errorf("CRD %s not Established: %w", crd.Name, err)
		}
	}
	return nil
}
