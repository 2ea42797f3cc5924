package admin_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/backend/memory"
)

// TestMountedOperationsServed: the operations openapi.yaml marks as mounted
// by the daemon (x-leasehold-mounted) are served by a real daemon.
func TestMountedOperationsServed(t *testing.T) {
	data, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, memory.New(), "d1", "default", strings.Replace(jobsYAML, "%[1]s", "a", -1))
	mounted := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op["x-leasehold-mounted"] != true {
				continue
			}
			mounted++
			req, _ := http.NewRequest(strings.ToUpper(method), n.url+path, nil)
			req.Header.Set("Authorization", "Bearer "+n.token) // /metrics needs the read scope
			resp, err := n.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s (mounted) = %d", strings.ToUpper(method), path, resp.StatusCode)
			}
		}
	}
	if mounted == 0 {
		t.Fatal("no mounted operation in openapi.yaml")
	}
}
