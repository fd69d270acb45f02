package server

import (
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/api"
)

type openapiDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
	Comps   struct {
		Schemas struct {
			ErrorBody struct {
				Properties struct {
					Code struct {
						Enum []string `json:"enum"`
					} `json:"code"`
				} `json:"properties"`
			} `json:"ErrorBody"`
		} `json:"schemas"`
	} `json:"components"`
}

// errorCodes are every error code the API may send.
var errorCodes = []string{api.CodeInvalidNamespace, api.CodeInvalidSize, api.CodeInvalidCount, api.CodeInvalidSettings,
	api.CodeInvalidJSON, api.CodeUnknownField, api.CodeUnknownParameter, api.CodeInvalidPrefer, api.CodeMissingToken, api.CodeInvalidToken,
	api.CodeForbidden, api.CodeNotFound, api.CodeRouteNotFound, api.CodeMethodNotAllowed, api.CodeExists,
	api.CodeExhausted, api.CodeBodyTooLarge, api.CodeRateLimited, api.CodeInternal, api.CodeMisconfigured,
	api.CodeUnavailable, api.CodeShuttingDown, api.CodeNotReady, api.CodeForeignHost, api.CodeCrossSite, api.CodeNotJSON}

// TestOpenAPIMatchesRoutes keeps openapi.json in step with the routes: every route is documented,
// every documented operation is a route, and the error codes are exactly those the server sends.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s := newTestServer(t, nil)
	w := s.do(t, request{method: "GET", path: "/openapi.json"})
	if w.Code != http.StatusOK {
		t.Fatalf("%d", w.Code)
	}
	var doc openapiDoc
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q, want 3.x", doc.OpenAPI)
	}
	param := regexp.MustCompile(`:([a-z]+)`)
	routes := map[string]bool{}
	for _, r := range s.e.Routes() {
		if r.Method == "echo_route_not_found" {
			continue
		}
		routes[strings.ToLower(r.Method)+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[method+" "+path] = true
		}
	}
	for r := range routes {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for d := range documented {
		if !routes[d] {
			t.Errorf("openapi.json documents %s, which is no route", d)
		}
	}
	if len(routes) < 9 {
		t.Fatalf("only %d routes found", len(routes))
	}

	codes := append([]string(nil), errorCodes...)
	for _, row := range errorTable {
		found := false
		for _, c := range codes {
			found = found || c == row.code
		}
		if !found {
			t.Errorf("error table code %q is not an api.Code constant", row.code)
		}
	}
	got := append([]string(nil), doc.Comps.Schemas.ErrorBody.Properties.Code.Enum...)
	sort.Strings(got)
	sort.Strings(codes)
	if strings.Join(got, ",") != strings.Join(codes, ",") {
		t.Errorf("openapi.json error codes\n%v\nwant\n%v", got, codes)
	}
}
