package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   map[string]any    `yaml:"depends_on"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// flagValue returns the value of --name=value in a command, or "".
func flagValue(cmd []string, name string) string {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestComposeTicketPair checks the two MySQL ticket servers the way ticketd would at start: one
// increment, distinct offsets, durable commits and binlog.
func TestComposeTicketPair(t *testing.T) {
	c := readCompose(t)
	offsets := map[string]string{}
	for _, name := range []string{"ticket-a", "ticket-b"} {
		s, ok := c.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if !strings.HasPrefix(s.Image, "mysql:8") {
			t.Errorf("%s runs %q, want MySQL 8", name, s.Image)
		}
		if inc := flagValue(s.Command, "auto-increment-increment"); inc != "2" {
			t.Errorf("%s: auto-increment-increment %q, want 2", name, inc)
		}
		off := flagValue(s.Command, "auto-increment-offset")
		if other, dup := offsets[off]; dup {
			t.Errorf("%s and %s share auto-increment-offset %q", other, name, off)
		}
		if off != "1" && off != "2" {
			t.Errorf("%s: offset %q, want 1 or 2", name, off)
		}
		offsets[off] = name
		for flag, want := range map[string]string{"innodb-flush-log-at-trx-commit": "1", "sync-binlog": "1"} {
			if got := flagValue(s.Command, flag); got != want {
				t.Errorf("%s: %s %q, want %s", name, flag, got, want)
			}
		}
	}
	redis := c.Services["redis"]
	if got := strings.Join(redis.Command, " "); !strings.Contains(got, "--appendonly yes") || !strings.Contains(got, "--appendfsync always") {
		t.Errorf("redis command %q, want AOF with appendfsync always", got)
	}
	mysqlDSNs := c.Services["ticketd"].Environment["TICKETD_MYSQL"]
	if !strings.Contains(mysqlDSNs, "@tcp(ticket-a:3306)/") || !strings.Contains(mysqlDSNs, "@tcp(ticket-b:3306)/") {
		t.Errorf("ticketd's TICKETD_MYSQL %q does not name both ticket servers", mysqlDSNs)
	}
	if c.Services["ticketd"].Command[0] != "serve" {
		t.Errorf("ticketd runs %v, want serve", c.Services["ticketd"].Command)
	}
}

// TestReadmeNamesOnlyComposeServices checks that the operations page's Compose section lists exactly
// the services docker-compose.yml defines.
func TestReadmeNamesOnlyComposeServices(t *testing.T) {
	c := readCompose(t)
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Run with Docker Compose")
	if !ok {
		t.Fatal("docs/operations.md has no '## Run with Docker Compose' section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	if len(named) == 0 {
		t.Fatal("the Compose section's table names no service")
	}
	for n := range named {
		if _, ok := c.Services[n]; !ok {
			t.Errorf("docs/operations.md names service %q, which docker-compose.yml does not define", n)
		}
	}
	for n := range c.Services {
		if !named[n] {
			t.Errorf("docker-compose.yml defines %q, which docs/operations.md does not describe", n)
		}
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	if strings.Count(df, "\nFROM ") < 2 {
		t.Error("want a multi-stage build")
	}
	// The user each image runs as: TestDockerfileImagesHaveNoShell.
	for _, want := range []string{"CGO_ENABLED=0", "HEALTHCHECK", "/healthz", "./cmd/ticketd", "./examples/shortener"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestDockerfileOwnsTheDataDir: the ticketd image's data directory (the one its CMD gives as --data-dir)
// is copied in owned by nonroot, the user the image runs as, before WORKDIR names it: its owner is
// stated, not left to how a builder creates a WORKDIR after USER.
func TestDockerfileOwnsTheDataDir(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	_, stage, ok := strings.Cut(string(b), " AS ticketd\n")
	if !ok {
		t.Fatal("no ticketd stage")
	}
	cmd := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindStringSubmatch(stage)
	var args []string
	if cmd == nil || yaml.Unmarshal([]byte(cmd[1]), &args) != nil {
		t.Fatalf("the ticketd stage has no CMD in exec form: %v", cmd)
	}
	dataDir := ""
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			dataDir = args[i+1]
		}
	}
	if dataDir == "" {
		t.Fatalf("CMD %v gives no --data-dir", args)
	}
	copyLine := regexp.MustCompile(`(?m)^COPY --from=build --chown=65532:65532 \S+ ` + regexp.QuoteMeta(dataDir) + `$`).FindStringIndex(stage)
	workdir := strings.Index(stage, "\nWORKDIR "+dataDir+"\n")
	user := strings.Index(stage, "\nUSER 65532:65532\n") // nonroot in the image's /etc/passwd
	if copyLine == nil || workdir < 0 || user < 0 || copyLine[0] > workdir {
		t.Fatalf("the ticketd stage does not copy %s in owned by 65532 (nonroot) before WORKDIR %s, running as 65532:\n%s", dataDir, dataDir, stage)
	}
}

// dockerignored reports whether the .dockerignore patterns leave path out of the build context: a
// pattern matches a path or one of its directories, from the context's root; ** matches any number of
// directories. (Exceptions with ! and character classes are not used, and refused.)
func dockerignored(t *testing.T, patterns []string, path string) bool {
	t.Helper()
	for _, p := range patterns {
		if strings.ContainsAny(p, "![\\") {
			t.Fatalf(".dockerignore pattern %q: this test does not read exceptions or classes", p)
		}
		var re strings.Builder
		re.WriteString("^")
		p = strings.TrimPrefix(p, "/")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(p[i:], "**"):
				re.WriteString(".*")
				i++
			case p[i] == '*':
				re.WriteString("[^/]*")
			case p[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		re.WriteString("(/.*)?$")
		if regexp.MustCompile(re.String()).MatchString(path) {
			return true
		}
	}
	return false
}

// TestDockerignore: the build context leaves out history, data directories, reports and test output,
// and keeps every file the build compiles or embeds.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, out := range []string{".git/HEAD", "ticketd-data/ticketd.db", "cmd/ticketd/ticketd-data/ticketd.db", "bench-report/report.md",
		"test-artifacts/status-page.png", "server/server.test", "cpu.prof", "ticketd", "shortener"} {
		if !dockerignored(t, patterns, out) {
			t.Errorf("%s is sent to the image build", out)
		}
	}
	keep := []string{"go.mod", "go.sum", "Dockerfile", "cmd/ticketd/main.go", "examples/shortener/main.go", "examples/shortener/links/service.go"}
	for _, embedded := range []string{"../schema/mysql/*.sql", "../server/status.html", "../server/openapi.json"} {
		files, _ := filepath.Glob(embedded)
		if len(files) == 0 {
			t.Fatalf("no file %s", embedded)
		}
		for _, f := range files {
			keep = append(keep, strings.TrimPrefix(f, "../"))
		}
	}
	for _, in := range keep {
		if dockerignored(t, patterns, in) {
			t.Errorf("%s, which the build needs, is left out of its context", in)
		}
	}
}

func TestKubernetesManifest(t *testing.T) {
	kinds := kubeDocs(t)
	b, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if kinds["Deployment"] == nil || kinds["Service"] == nil {
		t.Fatalf("want a Deployment and a Service, got %v", kinds)
	}
	text := string(b)
	for _, want := range []string{"/readyz", "/healthz", "runAsNonRoot: true", "TICKETD_MYSQL", "TICKETD_ADMIN_TOKEN", "readOnlyRootFilesystem: true"} {
		if !strings.Contains(text, want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
}

// secretVar matches a Compose variable that holds a password, token or key.
var secretVar = regexp.MustCompile(`\$\{?([A-Z_]*(PASSWORD|TOKEN|KEY|PWD)[A-Z_]*)`)

// interpolated matches a secret variable that Compose puts in ($VAR or ${VAR}, not $$VAR).
var interpolated = regexp.MustCompile(`(?:^|[^$])\$\{?[A-Z_]*(PASSWORD|TOKEN|KEY|PWD)`)

// TestComposeKeepsSecrets: Compose starts nothing with a default password or key (every secret is
// required from the environment, :?), puts no secret on a command line or in a healthcheck's
// arguments (ps and docker inspect show those), publishes ports on 127.0.0.1 only, caps Redis's
// memory without evicting links, and requires the shortener's scramble key.
func TestComposeKeepsSecrets(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)(:?[-?])([^}]*)\}`).FindAllStringSubmatch(text, -1) {
		name, op, def := m[1], m[2], m[3]
		if !secretVar.MatchString("$" + name) {
			continue
		}
		switch {
		case op == ":?":
		default:
			t.Errorf("${%s%s%s}: a secret must be required (:?), never defaulted", name, op, def)
		}
	}
	c := readCompose(t)
	for name, s := range c.Services {
		for _, a := range append(append([]string{}, s.Command...), s.Healthcheck.Test...) {
			// ${VAR} is put in by Compose, and shows in docker inspect; $$VAR is the container's own
			// variable, expanded there.
			if m := interpolated.FindString(a); m != "" || strings.HasPrefix(a, "-p") || strings.Contains(a, " -p") || strings.Contains(a, "--password") {
				t.Errorf("%s: a secret on a command line: %q", name, a)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface; publish on 127.0.0.1", name, p)
			}
		}
	}
	redis := strings.Join(c.Services["redis"].Command, " ")
	if !strings.Contains(redis, "--maxmemory ") || !strings.Contains(redis, "--maxmemory-policy noeviction") {
		t.Errorf("redis %q: want a memory cap and noeviction", redis)
	}
	sh := c.Services["shortener"]
	if !strings.Contains(sh.Environment["SHORTENER_CREATE_TOKEN"], ":?") {
		t.Errorf("the shortener listens beyond loopback: it must require SHORTENER_CREATE_TOKEN: %v", sh.Environment)
	}
	if !strings.Contains(sh.Environment["SHORTENER_SCRAMBLE_KEY"], ":?") || flagValue(sh.Command, "base-url") == "" || flagValue(sh.Command, "max-links") == "" {
		t.Errorf("the shortener must require SHORTENER_SCRAMBLE_KEY and get --base-url and --max-links: %v %v", sh.Command, sh.Environment)
	}
	for _, a := range sh.Command {
		if a == "--dev" || strings.HasPrefix(a, "--dev=") || strings.HasPrefix(a, "--scramble=") {
			t.Errorf("the shortener runs with %s", a)
		}
	}
}

// composeGrants runs deploy/mysql-init/ticketd-users.sh as the mysql image would (sourced, the
// variables set), with a stand-in for the mysql client that prints the SQL it is given.
func composeGrants(t *testing.T, dbPassword string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", `set -eo pipefail; mysql() { printf 'mysql %s\n' "$*"; cat; }; source mysql-init/ticketd-users.sh`)
	cmd.Env = append(os.Environ(), "MYSQL_ROOT_PASSWORD=root-pw", "TICKETD_DB_PASSWORD="+dbPassword, "TICKETD_MIGRATE_PASSWORD=migrate-pw")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ticketd-users.sh: %v\n%s", err, out)
	}
	return string(out)
}

// TestComposeDatabaseUsers: each ticket server gets the users script; `serve` connects as ticketd,
// which may SELECT, INSERT and UPDATE and nothing else; `ticketd-init` (migrate and namespace create)
// as ticketd_migrate; the root password reaches mysql through the environment; a password with quotes
// is quoted as SQL.
func TestComposeDatabaseUsers(t *testing.T) {
	c := readCompose(t)
	for _, name := range []string{"ticket-a", "ticket-b"} {
		mounted := false
		for _, v := range c.Services[name].Volumes {
			mounted = mounted || strings.HasPrefix(v, "./deploy/mysql-init:/docker-entrypoint-initdb.d")
		}
		if !mounted {
			t.Errorf("%s does not mount deploy/mysql-init into /docker-entrypoint-initdb.d", name)
		}
	}
	user := func(service string) string {
		dsn := c.Services[service].Environment["TICKETD_MYSQL"]
		u, _, _ := strings.Cut(dsn, ":")
		return u
	}
	if user("ticketd") != "ticketd" || user("ticketd-init") != "ticketd_migrate" {
		t.Fatalf("serve connects as %q and ticketd-init as %q, want ticketd and ticketd_migrate", user("ticketd"), user("ticketd-init"))
	}
	for _, a := range c.Services["ticketd"].Command {
		if a == "--auto-migrate" {
			t.Error("serve runs --auto-migrate, which its user may not")
		}
	}
	sql := composeGrants(t, `it's\secret`)
	for _, want := range []string{
		"mysql --protocol=socket -uroot",
		`CREATE USER IF NOT EXISTS 'ticketd'@'%' IDENTIFIED BY 'it''s\\secret';`,
		"GRANT SELECT, INSERT, UPDATE ON ticketd.* TO 'ticketd'@'%';",
		"GRANT CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE ON ticketd.* TO 'ticketd_migrate'@'%';",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("the users script lacks %s:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, "root-pw") || strings.Count(sql, "GRANT ") != 2 {
		t.Errorf("the users script puts the root password on a command line, or grants more than twice:\n%s", sql)
	}
}
