package main

import (
	"encoding/json"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/internal/cliflag"
	"github.com/ticketd/ticketd/internal/testenv"
)

// readmeSection returns the README's text under heading (e.g. "## Install"), up to the next heading of
// the same level or above.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	return docSection(t, "README.md", heading)
}

// docSection returns the text under heading in the repository's file path (e.g. "docs/operations.md"),
// up to the next heading of the same level or above.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut("\n"+string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", path, heading)
	}
	level := heading[:strings.Index(heading, " ")+1]
	for _, l := range []string{"# ", "## ", "### "} {
		if len(l) > len(level) {
			break
		}
		if i := strings.Index(sec, "\n"+l); i >= 0 {
			sec = sec[:i]
		}
	}
	return sec
}

// codeBlocks returns the bodies of the fenced blocks of language lang in text.
func codeBlocks(text, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// shellLine is one line of a README shell block: the command and its comment.
type shellLine struct{ cmd, comment string }

func shellLines(block string) []shellLine {
	var out []shellLine
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		cmd, comment, _ := strings.Cut(l, "#")
		out = append(out, shellLine{strings.TrimSpace(cmd), strings.TrimSpace(comment)})
	}
	return out
}

// TestConfigurationReferenceIsComplete keeps the README's configuration reference true: every flag of
// every command, and its environment variable, must be in it.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	ref := docSection(t, "docs/configuration.md", "# Configuration")
	for name, info := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cmd := info.new()
		cmd.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			if !strings.Contains(ref, "`"+dashes+f.Name) {
				t.Errorf("%s: flag %s%s is not in the configuration reference (docs/configuration.md)", name, dashes, f.Name)
			}
			if env := cliflag.EnvName(f.Name); env != "" && !strings.Contains(ref, env) {
				t.Errorf("%s: %s (for --%s) is not in the configuration reference (docs/configuration.md)", name, env, f.Name)
			}
		})
	}
}

// TestReadmeInstallAndFirstLease runs the README's Install block as written (go install from the clone,
// into a directory of the test's own), then its first command with the installed ticketd in a fresh
// directory: the output must be the README's, byte for byte, and a second run the block it says follows.
func TestReadmeInstallAndFirstLease(t *testing.T) {
	gobin := t.TempDir()
	installed := filepath.Join(gobin, "ticketd")
	install := codeBlocks(readmeSection(t, "## Install"), "sh")
	if len(install) == 0 {
		t.Fatal("the Install section has no sh block")
	}
	for _, l := range shellLines(install[0]) {
		args := strings.Fields(l.cmd)
		var cmd *exec.Cmd
		switch {
		case len(args) == 0:
			continue
		case args[0] == "go":
			cmd = exec.Command("go", args[1:]...)
			cmd.Dir = "../.."
			cmd.Env = append(os.Environ(), "GOBIN="+gobin)
		case args[0] == "ticketd":
			cmd = exec.Command(installed, args[1:]...)
		default:
			t.Fatalf("the Install block runs %q; this test knows go and ticketd", l.cmd)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", l.cmd, err, out)
		}
	}

	first := readmeSection(t, "## The two commands")
	sh, shown := codeBlocks(first, "sh"), codeBlocks(first, "json")
	if len(sh) == 0 || len(shown) == 0 {
		t.Fatal("the first section shows no command and its output")
	}
	args, ok := strings.CutPrefix(shellLines(sh[0])[0].cmd, "go run ./cmd/ticketd ")
	if !ok {
		t.Fatalf("the first command %q is not go run ./cmd/ticketd", sh[0])
	}
	dir := t.TempDir()
	lease := func() string {
		cmd := exec.Command(installed, strings.Fields(args)...)
		cmd.Dir = dir // a fresh ./ticketd-data, as in a fresh clone
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ticketd %s: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}
	if got := lease(); got != shown[0] {
		t.Fatalf("ticketd %s printed\n%s\nthe README shows\n%s", args, got, shown[0])
	}
	next := regexp.MustCompile("next block follows \\(`(\"start\":\"\\d+\")`\\)").FindStringSubmatch(first)
	if next == nil {
		t.Fatal("the README no longer says where the next block starts")
	}
	if got := lease(); !strings.Contains(got, next[1]) {
		t.Fatalf("the second run printed %s; the README says %s", got, next[1])
	}
}

// TestReadmePairWalkthrough runs the README's ticket pair block on a fresh pair: every command succeeds,
// the first block of each server is one the README shows, and each server's second block starts where
// the README says.
func TestReadmePairWalkthrough(t *testing.T) {
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(testenv.Pair(t))}
	section := docSection(t, "docs/operations.md", "## Using the ticket pair")
	blocks := codeBlocks(section, "sh")
	if len(blocks) == 0 {
		t.Fatal("the pair section has no sh block")
	}
	lines := shellLines(blocks[0])
	shownBlock := regexp.MustCompile(`(\{.*),\.\.\.\}`)
	for i, l := range lines {
		if l.cmd == "" || strings.HasPrefix(l.cmd, "export ") {
			continue
		}
		args := strings.Fields(strings.TrimPrefix(l.cmd, "ticketd "))
		if args[0] != "lease" {
			if _, errOut, code := run(t, env, args...); code != 0 {
				t.Fatalf("%s: exit %d: %s", l.cmd, code, errOut)
			}
			continue
		}
		// The blocks shown for the lease: on its line and the comment lines under it.
		var shown []string
		for j := i; j < len(lines) && (j == i || lines[j].cmd == ""); j++ {
			if m := shownBlock.FindStringSubmatch(lines[j].comment); m != nil {
				shown = append(shown, m[1])
			}
		}
		if len(shown) != 2 {
			t.Fatalf("the README shows %d blocks for %q, want one per server", len(shown), l.cmd)
		}
		byServer := map[string][]string{}
		twoEach := func() bool {
			for _, outs := range byServer {
				if len(outs) < 2 {
					return false
				}
			}
			return len(byServer) == 2
		}
		for n := 0; n < 60 && !twoEach(); n++ {
			out, errOut, code := run(t, env, args...) // a process each: its first lease goes to either server
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", l.cmd, code, errOut)
			}
			b := decodeBlock(t, out)
			byServer[b.Server] = append(byServer[b.Server], strings.TrimSpace(out))
		}
		if !twoEach() {
			t.Fatalf("60 leases did not give two blocks from each server: %v", byServer)
		}
		for _, s := range shown {
			found := false
			for _, outs := range byServer {
				found = found || strings.HasPrefix(outs[0], s)
			}
			if !found {
				t.Errorf("the README shows %s..., which is neither server's first block: %v", s, byServer)
			}
		}
		second := regexp.MustCompile(`A's second\s+block starts at (\d+), B's at (\d+)`).FindStringSubmatch(section)
		if second == nil {
			t.Fatal("the README no longer says where each server's second block starts")
		}
		for _, outs := range byServer {
			first, next := decodeBlock(t, outs[0]), decodeBlock(t, outs[1])
			want := second[1]
			if first.Start == "2" {
				want = second[2]
			}
			if next.Start != want {
				t.Errorf("%s: second block from %s, the README says %s", first.Server, next.Start, want)
			}
		}
	}
}

// TestReadmeDockerRun runs what the README's docker run example runs in the image, without Docker: the
// ticketd stage's CMD (on a free port), a fresh directory standing for the volume at its --data-dir,
// the variables the example hands over with -e, and the example's request, whose answer must be the
// README's.
func TestReadmeDockerRun(t *testing.T) {
	section := readmeSection(t, "## Run with Docker")
	sh, shown := codeBlocks(section, "sh"), codeBlocks(section, "json")
	if len(sh) == 0 || len(shown) == 0 {
		t.Fatal("the Docker section shows no commands and answer")
	}
	var dockerRun []string
	var curl string
	for _, l := range shellLines(sh[0]) {
		if strings.HasPrefix(l.cmd, "docker run ") {
			dockerRun = strings.Fields(l.cmd)
		}
		if strings.Contains(l.cmd, "curl ") {
			curl = l.cmd
		}
	}
	values := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}
	env, volume := map[string]string{}, ""
	for i := 1; i < len(dockerRun); i++ {
		switch dockerRun[i-1] {
		case "-e":
			if strings.Contains(dockerRun[i], "=") {
				t.Errorf("docker run -e %s puts a value on the command line", dockerRun[i])
			}
			env[dockerRun[i]] = values[dockerRun[i]]
		case "-v":
			_, volume, _ = strings.Cut(dockerRun[i], ":")
		}
	}
	if env["TICKETD_ADMIN_TOKEN"] == "" || volume == "" {
		t.Fatalf("docker run %v hands over no admin token or mounts no volume", dockerRun)
	}

	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	_, stage, _ := strings.Cut(string(b), " AS ticketd\n")
	cmdLine := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindStringSubmatch(stage)
	var cmd []string
	if cmdLine == nil || json.Unmarshal([]byte(cmdLine[1]), &cmd) != nil || len(cmd) == 0 || cmd[0] != "serve" {
		t.Fatalf("the ticketd stage's CMD is not serve in exec form: %v", cmdLine)
	}
	args := cmd[1:]
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "--data-dir":
			if args[i] != volume {
				t.Fatalf("the volume is mounted at %s, the store is in %s", volume, args[i])
			}
			args[i] = t.TempDir()
		case "--listen":
			host, _, _ := strings.Cut(args[i], ":")
			args[i] = host + ":0" // the same interfaces, on a free port
		}
	}
	p := startServe(t, env, args...)

	// The token goes to curl on its standard input, from printf (a shell builtin): never on a command line.
	m := regexp.MustCompile(`^printf 'Authorization: Bearer %s\\n' "\$(\w+)" \| curl -X (\w+) -H @- localhost:8080(\S+) -d '([^']*)'$`).FindStringSubmatch(curl)
	if m == nil {
		t.Fatalf("this test does not read the request %q", curl)
	}
	m[1], m[2] = m[2], m[1]                                                 // method, variable
	_, port, err := net.SplitHostPort(strings.TrimPrefix(p.URL, "http://")) // listening on every interface
	if err != nil {
		t.Fatal(err)
	}
	if got := mustCall(t, 200, m[1], "http://127.0.0.1:"+port+m[3], env[m[2]], m[4]); string(got) != shown[0] {
		t.Fatalf("the container would answer %s; the README shows %s", got, shown[0])
	}
}

// TestReadmeLayoutMatchesTheTree: every directory the README's Layout section names exists, and every
// directory that holds Go code is named there, or lies below one that is.
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	sec := docSection(t, "docs/development.md", "## Layout")
	named := map[string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], "/") || strings.HasPrefix(line, " ") {
			continue
		}
		dir := strings.TrimSuffix(f[0], "/")
		named[dir] = true
		if st, err := os.Stat(filepath.Join("../..", dir)); err != nil || !st.IsDir() {
			t.Errorf("the Layout names %s/, which is not a directory of the tree", dir)
		}
	}
	if len(named) < 10 {
		t.Fatalf("the Layout names %d directories; the parse found no list", len(named))
	}
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".go") {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for p := filepath.ToSlash(dir); ; p = filepath.ToSlash(filepath.Dir(p)) {
			if named[p] {
				return nil
			}
			if p == "." || p == "/" {
				break
			}
		}
		t.Errorf("%s holds Go code, and neither it nor a directory above it is in the README's Layout", filepath.ToSlash(dir))
		return filepath.SkipDir
	})
	if err != nil {
		t.Fatal(err)
	}
}
