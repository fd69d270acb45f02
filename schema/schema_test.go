package schema_test

import (
	"strings"
	"testing"

	"github.com/ticketd/ticketd/schema"
)

func TestStatements(t *testing.T) {
	got := schema.Statements("-- a comment; not a statement\nCREATE TABLE a (\n  x INT -- inline\n);\n\nINSERT INTO a VALUES (1);\nSELECT 1")
	if len(got) != 3 || !strings.HasPrefix(got[0], "CREATE TABLE a (") || got[1] != "INSERT INTO a VALUES (1)" || got[2] != "SELECT 1" {
		t.Fatalf("Statements = %q", got)
	}
}

func TestMigrationsAreNumberedAndParse(t *testing.T) {
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 || migs[0].Version != 1 || schema.Latest() != migs[len(migs)-1].Version {
		t.Fatalf("migrations %v", migs)
	}
	all := ""
	for i, m := range migs {
		if m.Version != i+1 {
			t.Fatalf("migration %s: versions must run 1, 2, 3… without holes", m.Name)
		}
		if len(schema.Statements(m.SQL)) == 0 {
			t.Fatalf("migration %s has no statement", m.Name)
		}
		all += m.SQL
	}
	if !strings.Contains(all, "CREATE TABLE IF NOT EXISTS ticketd_namespaces") {
		t.Errorf("no CREATE TABLE for ticketd_namespaces")
	}
	// Flickr's Tickets64 is the benchmark's baseline, or an operator's table to adopt: never ticketd's.
	for _, stmt := range schema.Statements(all) {
		if strings.Contains(strings.ToLower(stmt), "tickets64") {
			t.Errorf("a migration touches Tickets64: %s", stmt)
		}
	}
}
