package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// pinned matches an image reference of an exact version (x.y.z) or a digest.
var pinned = regexp.MustCompile(`(:v?\d+\.\d+\.\d+[^:@]*|@sha256:[0-9a-f]{64})$`)

// kubeDocs reads deploy/kubernetes.yaml's documents by kind.
func kubeDocs(t *testing.T) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	out := map[string]map[string]any{}
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[doc["kind"].(string)] = doc
	}
}

// at walks a YAML document by map keys, and list indexes written as numbers.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestKubernetesHardening: the pod meets the "restricted" Pod Security level (seccomp RuntimeDefault
// besides non-root, no privilege escalation and no capabilities), mounts no service-account token,
// runs a pinned image, gets a metrics token, and a NetworkPolicy lets in only its clients and lets
// out only DNS and the ticket servers.
func TestKubernetesHardening(t *testing.T) {
	docs := kubeDocs(t)
	pod := at(docs["Deployment"], "spec", "template", "spec")
	if at(pod, "automountServiceAccountToken") != false {
		t.Error("the pod mounts the service-account token; set automountServiceAccountToken: false")
	}
	if at(pod, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		t.Error("the pod has no seccompProfile RuntimeDefault (required by the restricted Pod Security level)")
	}
	c := at(pod, "containers", 0)
	if img, _ := at(c, "image").(string); !pinned.MatchString(img) {
		t.Errorf("image %q is not pinned to a version or digest", img)
	}
	if at(c, "securityContext", "allowPrivilegeEscalation") != false || at(c, "securityContext", "capabilities", "drop", 0) != "ALL" {
		t.Error("the container may escalate privileges or keeps capabilities")
	}
	hasMetricsToken := false
	for _, e := range at(c, "env").([]any) {
		hasMetricsToken = hasMetricsToken || (at(e, "name") == "TICKETD_METRICS_TOKEN" && at(e, "valueFrom", "secretKeyRef", "name") != nil)
	}
	if !hasMetricsToken {
		t.Error("no TICKETD_METRICS_TOKEN from the Secret: Prometheus would need the admin token")
	}
	np := docs["NetworkPolicy"]
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	if at(np, "spec", "podSelector", "matchLabels", "app") != "ticketd" {
		t.Errorf("the NetworkPolicy does not select ticketd's pods: %v", at(np, "spec", "podSelector"))
	}
	types := map[any]bool{}
	for _, ty := range at(np, "spec", "policyTypes").([]any) {
		types[ty] = true
	}
	if !types["Ingress"] || !types["Egress"] || at(np, "spec", "ingress", 0, "from") == nil || at(np, "spec", "egress", 0) == nil {
		t.Errorf("the NetworkPolicy must restrict both ingress (to named clients) and egress: %v", at(np, "spec"))
	}
}

type hardenedService struct {
	Image       string            `yaml:"image"`
	User        string            `yaml:"user"`
	ReadOnly    bool              `yaml:"read_only"`
	CapDrop     []string          `yaml:"cap_drop"`
	SecurityOpt []string          `yaml:"security_opt"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// TestComposeHardening: every service has a read-only root, no capabilities and no privilege
// escalation; images are pinned; MySQL's root logs in from inside its container only; Redis needs a
// password, which no command line shows, and the shortener has it.
func TestComposeHardening(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]hardenedService `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for name, s := range c.Services {
		if !s.ReadOnly || len(s.CapDrop) != 1 || s.CapDrop[0] != "ALL" || !strings.Contains(strings.Join(s.SecurityOpt, " "), "no-new-privileges:true") {
			t.Errorf("%s: want read_only: true, cap_drop: [ALL], security_opt: [no-new-privileges:true]; got %v %v %v", name, s.ReadOnly, s.CapDrop, s.SecurityOpt)
		}
		if s.Image != "" && !pinned.MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to a version or digest", name, s.Image)
		}
	}
	for _, name := range []string{"ticket-a", "ticket-b"} {
		if h := c.Services[name].Environment["MYSQL_ROOT_HOST"]; h != "localhost" {
			t.Errorf("%s: MYSQL_ROOT_HOST %q, want localhost (no root@%%)", name, h)
		}
	}
	redis := c.Services["redis"]
	if !strings.Contains(redis.Environment["REDIS_PASSWORD"], ":?") || !strings.Contains(strings.Join(redis.Command, " "), "$$REDIS_PASSWORD") ||
		!strings.Contains(strings.Join(redis.Healthcheck.Test, " "), "REDISCLI_AUTH") {
		t.Errorf("redis: want a required REDIS_PASSWORD, read in the container (requirepass) and by its healthcheck: %v %v", redis.Command, redis.Environment)
	}
	if r := c.Services["shortener"].Environment["SHORTENER_REDIS"]; !strings.Contains(r, "${REDIS_PASSWORD") || !strings.HasPrefix(r, "redis://") {
		t.Errorf("the shortener does not reach Redis with its password: SHORTENER_REDIS=%q", r)
	}
}

// TestEnvFilesStayOut: an .env file of secrets is neither committed nor sent to an image build.
func TestEnvFilesStayOut(t *testing.T) {
	for _, f := range []string{"../.gitignore", "../.dockerignore"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			found = found || l == ".env" || l == "/.env" || l == "**/.env" || l == ".env*" || l == "**/.env*"
		}
		if !found {
			t.Errorf("%s does not leave out .env", f)
		}
	}
}

// TestDockerfileBaseImagesPinned: the build image is pinned to a Go release.
func TestDockerfileBaseImagesPinned(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG GO_IMAGE=(\S+)$`).FindStringSubmatch(string(b))
	if m == nil || !pinned.MatchString(m[1]) && !regexp.MustCompile(`:\d+\.\d+\.\d+-`).MatchString(m[1]) {
		t.Errorf("GO_IMAGE %v is not pinned to a Go release", m)
	}
}
