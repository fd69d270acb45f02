// Package schema holds the SQL of ticketd's ticket servers, embedded in the binary, and applies it.
// Migrations are numbered files run once each, in order, and recorded in ticketd_schema_migrations.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
)

//go:embed mysql/*.sql
var files embed.FS

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the MySQL migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "mysql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("schema: migration file %q is not named NNNN_name.sql", name)
		}
		b, err := files.ReadFile(path.Join("mysql", name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("schema: two migrations numbered %d", out[i].Version)
		}
	}
	return out, nil
}

// Statements splits a migration into statements: each ends with a semicolon at the end of a line, and
// lines starting with -- are comments.
func Statements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sqlText, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Migrate applies every migration the database has not recorded yet. It is safe to run again and from
// several processes at once (each migration's statements are idempotent, and the version row is
// inserted with INSERT IGNORE).
func Migrate(ctx context.Context, db *sql.DB) (applied []int, err error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ticketd_schema_migrations (
  version    INT NOT NULL PRIMARY KEY,
  name       VARCHAR(255) NOT NULL,
  applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`); err != nil {
		return nil, fmt.Errorf("schema: create ticketd_schema_migrations: %w", err)
	}
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	done := map[int]bool{}
	rows, err := db.QueryContext(ctx, "SELECT version FROM ticketd_schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("schema: read applied migrations: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		done[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, m := range migs {
		if done[m.Version] {
			continue
		}
		for _, stmt := range Statements(m.SQL) {
			if _, err := db.ExecContext(ctx, stmt); err != nil && !columnExists(err) {
				return applied, fmt.Errorf("schema: migration %s: %w", m.Name, err)
			}
		}
		if _, err := db.ExecContext(ctx, "INSERT IGNORE INTO ticketd_schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
			return applied, fmt.Errorf("schema: record migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// columnExists reports whether err is MySQL's "Duplicate column name": an ADD COLUMN that a migration
// interrupted before it was recorded (or run by another process at once) already made. MySQL 8 has no
// ADD COLUMN IF NOT EXISTS.
func columnExists(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1060
}

// Latest is the highest migration version this binary knows.
func Latest() int { return latest() }

// latest reads the embedded migrations once: they are fixed in the binary, and every check of a
// server's schema (each new connection's verification) asks for it.
var latest = sync.OnceValue(func() int {
	migs, err := Migrations()
	if err != nil || len(migs) == 0 {
		return 0
	}
	return migs[len(migs)-1].Version
})
