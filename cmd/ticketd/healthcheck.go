package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

func init() {
	register(commandInfo{name: "healthcheck",
		summary: "Exit 0 when a ticketd (or any service) answers 200 at --url. For container HEALTHCHECKs in images that have no curl.",
		new:     func() command { return &healthcheckCmd{} }})
}

type healthcheckCmd struct {
	url     string
	timeout time.Duration
}

func (c *healthcheckCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080/healthz", "`URL` to GET")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
}

func (c *healthcheckCmd) run(ctx context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("healthcheck takes no arguments")
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--url %q must be an http(s) URL with a host", c.url)
	}
	if c.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", c.url, resp.Status)
	}
	fmt.Fprintln(m.Stdout, "ok")
	return nil
}
