// Package clientip says which client a request comes from, for rate limits and logs: the peer's
// address, or, when the peer is a proxy the operator trusts, the address that proxy saw. Addresses of
// one IPv6 /64 count as one client, since a single host usually holds a whole /64.
package clientip

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// ParsePrefixes parses a comma-separated list of CIDRs (10.0.0.0/8, fd00::/8) or single addresses
// (a /32 or /128), as given to --trusted-proxy. Its messages say what form an item takes.
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR (like 10.0.0.0/8 or fd00::/8) nor an address", item)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// Extractor returns the echo IPExtractor for the trusted proxies: with none, the peer's address,
// never X-Forwarded-For (a client must not pick the rate-limit bucket it uses); with some, a peer among
// them is believed about who came before it, and the client is the nearest address in its
// X-Forwarded-For that is not a trusted proxy. No range is trusted by default, loopback and private
// networks included.
func Extractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// Key names the client at addr for a per-client limit: an IPv4 address as it is, an IPv6 address by
// its /64 ("2001:db8:1:2::/64"), so that one host cannot take a fresh limit from each of its 2^64
// addresses. A string that is no address is returned as it is.
func Key(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}

// LoopbackListen reports whether a listen address (HOST:PORT) is reachable from this machine only:
// localhost or a loopback address. An empty host (":8080") listens on every interface.
func LoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
