package clientip

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestKeyGroupsIPv6By64(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not an address", "not an address"},
	} {
		if got := Key(c.in); got != c.want {
			t.Errorf("Key(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.0/8, 192.0.2.9 ,fd00::1/8,")
	if err != nil || len(got) != 3 || got[0].String() != "10.0.0.0/8" || got[1].String() != "192.0.2.9/32" || got[2].String() != "fd00::/8" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0"} {
		if _, err := ParsePrefixes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestExtractorBelievesOnlyTrustedProxies: X-Forwarded-For counts only from a trusted peer, and then
// names the nearest address that is not a trusted proxy; loopback is not trusted unless listed.
func TestExtractorBelievesOnlyTrustedProxies(t *testing.T) {
	trusted, _ := ParsePrefixes("10.0.0.0/8")
	for _, c := range []struct {
		trusted   bool
		peer, xff string
		want      string
	}{
		{false, "10.1.1.1:5000", "198.51.100.1", "10.1.1.1"},
		{true, "10.1.1.1:5000", "198.51.100.1", "198.51.100.1"},
		{true, "10.1.1.1:5000", "203.0.113.9, 198.51.100.1, 10.2.2.2", "198.51.100.1"},
		{true, "192.0.2.50:5000", "198.51.100.1", "192.0.2.50"},
		{true, "127.0.0.1:5000", "198.51.100.1", "127.0.0.1"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.peer
		r.Header.Set(echo.HeaderXForwardedFor, c.xff)
		var ex echo.IPExtractor
		if c.trusted {
			ex = Extractor(trusted)
		} else {
			ex = Extractor(nil)
		}
		if got := ex(r); got != c.want {
			t.Errorf("trusted=%v peer %s XFF %q: %s, want %s", c.trusted, c.peer, c.xff, got, c.want)
		}
	}
}
