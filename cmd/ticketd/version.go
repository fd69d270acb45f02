package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/ticketd/ticketd/internal/version"
)

func init() {
	register(commandInfo{name: "version",
		summary: "Print the version of ticketd, the commit it was built from and whether the tree had uncommitted changes. Also: ticketd --version.",
		new:     func() command { return &versionCmd{} }})
}

type versionCmd struct{ json bool }

func (c *versionCmd) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.json, "json", false, "print it as a JSON object")
}

func (c *versionCmd) run(_ context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("version takes no arguments")
	}
	in := version.Get()
	if c.json {
		return m.printJSON(in)
	}
	_, err := fmt.Fprintln(m.Stdout, in)
	return err
}
