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
// escalation (its image is pinned: TestImagesPinnedByDigest); MySQL's root logs in from inside its
// container only; Redis needs a password, which no command line shows, and the shortener has it.
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

// dockerInstr is one Dockerfile instruction: its keyword in upper case and its arguments, continuation
// lines joined.
type dockerInstr struct{ cmd, args string }

// dockerStage is one FROM and the instructions under it; base is the FROM's image with the default
// values of the ARGs before the first FROM put in.
type dockerStage struct {
	name, base string
	instrs     []dockerInstr
}

// readDockerfile reads the repository's Dockerfile into its stages.
func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var instrs []dockerInstr
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if trimmed := strings.TrimSpace(l); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // comment lines end no instruction, also inside a continued one
		}
		if more, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), "\\"); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(l)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		instrs = append(instrs, dockerInstr{strings.ToUpper(cmd), strings.TrimSpace(args)})
		cur.Reset()
	}
	globals := map[string]string{}
	var stages []dockerStage
	for _, in := range instrs {
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			name, def, _ := strings.Cut(in.args, "=")
			globals[name] = def
		case in.cmd == "FROM":
			var words []string
			for _, w := range strings.Fields(in.args) {
				if !strings.HasPrefix(w, "--") {
					words = append(words, w)
				}
			}
			if len(words) == 0 {
				t.Fatalf("FROM %s names no image", in.args)
			}
			st := dockerStage{base: os.Expand(words[0], func(v string) string { return globals[v] })}
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				st.name = words[2]
			}
			stages = append(stages, st)
		case len(stages) > 0:
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
		}
	}
	return stages
}

// digestPinned matches an image named by repository, tag and digest: the tag for the reader, the
// digest for the engine, which pulls those bytes and no others.
var digestPinned = regexp.MustCompile(`^[a-z0-9._/:-]+:[\w.-]+@sha256:[0-9a-f]{64}$`)

// TestImagesPinnedByDigest: every image a build or Compose pulls is pinned by its digest (a tag can be
// pushed again; a digest names the same bytes forever): each FROM, with its ARG's default, is scratch,
// an earlier stage or name:tag@sha256:<64 hex>, and so is each Compose service's image.
func TestImagesPinnedByDigest(t *testing.T) {
	stages := readDockerfile(t)
	seen := map[string]bool{}
	for i, st := range stages {
		switch {
		case st.base == "scratch" || seen[st.base]:
		case !digestPinned.MatchString(st.base):
			t.Errorf("Dockerfile stage %d (%s): FROM %q is neither scratch, an earlier stage nor pinned as name:tag@sha256:<digest>", i+1, st.name, st.base)
		}
		if st.name != "" {
			seen[st.name] = true
		}
	}
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build any    `yaml:"build"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for name, s := range c.Services {
		switch {
		case s.Image == "" && s.Build == nil:
			t.Errorf("compose service %s has neither an image nor a build", name)
		case s.Image != "" && s.Build == nil && !digestPinned.MatchString(s.Image):
			t.Errorf("compose service %s: image %q is not pinned as name:tag@sha256:<digest>", name, s.Image)
		}
	}
}

// execForm matches an instruction's arguments in exec form, a JSON array: run without a shell.
var execForm = regexp.MustCompile(`^\[\s*".*"\s*\]$`)

// TestDockerfileImagesHaveNoShell: the two images (targets ticketd and shortener) are built on scratch
// and hold only what the build stage made for them under /out: no shell, no package, nothing that a
// RUN could use, so none runs; their entrypoint, command and healthcheck are in exec form (a shell form
// would need /bin/sh); they run as 65532:65532, numeric, so that Kubernetes' runAsNonRoot can check it
// without reading /etc/passwd; and the build stage writes that user and group, and the certificate
// authorities, into the images' /etc.
func TestDockerfileImagesHaveNoShell(t *testing.T) {
	stages := readDockerfile(t)
	byName := map[string]dockerStage{}
	for _, st := range stages {
		byName[st.name] = st
	}
	for _, target := range []string{"ticketd", "shortener"} {
		st, ok := byName[target]
		if !ok {
			t.Errorf("the Dockerfile has no stage %s", target)
			continue
		}
		chain := stageChain(byName, st)
		if root := chain[len(chain)-1]; root.base != "scratch" {
			t.Errorf("%s: built on %q, not on scratch", target, root.base)
		}
		user, entrypoint, healthcheck, etc := "", "", "", false
		for i := len(chain) - 1; i >= 0; i-- {
			for _, in := range chain[i].instrs {
				switch in.cmd {
				case "RUN", "ADD", "ONBUILD", "SHELL":
					t.Errorf("%s (stage %s): %s %s: nothing may run, or come from outside the build, in an image without a shell", target, chain[i].name, in.cmd, in.args)
				case "COPY":
					var from string
					var paths []string
					for _, w := range strings.Fields(in.args) {
						if f, ok := strings.CutPrefix(w, "--from="); ok {
							from = f
						} else if !strings.HasPrefix(w, "--") {
							paths = append(paths, w)
						}
					}
					if from != "build" || len(paths) < 2 {
						t.Errorf("%s: COPY %s: copy only from the build stage", target, in.args)
						continue
					}
					etc = etc || strings.Join(paths, " ") == "/out/root/ /"
					for _, src := range paths[:len(paths)-1] {
						if !strings.HasPrefix(src, "/out/") {
							t.Errorf("%s: COPY %s: %s is not what the build stage made for the image (under /out/)", target, in.args, src)
						}
					}
				case "USER":
					user = in.args
				case "ENTRYPOINT", "CMD":
					if in.cmd == "ENTRYPOINT" {
						entrypoint = in.args
					}
					if !execForm.MatchString(in.args) {
						t.Errorf("%s: %s %s is in shell form, which needs /bin/sh", target, in.cmd, in.args)
					}
				case "HEALTHCHECK":
					healthcheck = in.args
					if _, cmd, ok := strings.Cut(in.args, "CMD "); !ok || !execForm.MatchString(strings.TrimSpace(cmd)) {
						t.Errorf("%s: HEALTHCHECK %s: want CMD in exec form", target, in.args)
					}
				}
			}
		}
		if user != "65532:65532" {
			t.Errorf("%s runs as %q, want USER 65532:65532", target, user)
		}
		if entrypoint == "" || healthcheck == "" || !etc {
			t.Errorf("%s: want an ENTRYPOINT, a HEALTHCHECK and the build stage's /out/root/ as its /; got %q, %q, %v", target, entrypoint, healthcheck, etc)
		}
	}
	build, ok := byName["build"]
	if !ok {
		t.Fatal("no build stage")
	}
	var runs strings.Builder
	for _, in := range build.instrs {
		if in.cmd == "RUN" {
			runs.WriteString(in.args + "\n")
		}
	}
	for _, want := range []string{`nonroot:x:65532:65532:`, `>/out/root/etc/passwd`, `nonroot:x:65532:`, `>/out/root/etc/group`,
		`/etc/ssl/certs/ca-certificates.crt /out/root/etc/ssl/certs/ca-certificates.crt`} {
		if !strings.Contains(runs.String(), want) {
			t.Errorf("the build stage does not make the images' /etc: no %q in its RUNs", want)
		}
	}
}

// stageChain is a stage and the stages it is built on, down to the one on scratch or an image.
func stageChain(byName map[string]dockerStage, st dockerStage) []dockerStage {
	chain := []dockerStage{st}
	for base, ok := byName[st.base]; ok && len(chain) <= len(byName); base, ok = byName[base.base] {
		chain = append(chain, base)
	}
	return chain
}
