package api

import (
	"math"
	"strings"
)

// commonWords are the roots of the passwords people pick first. A token that holds one costs a guesser
// a pick from this list, not a character at a time.
var commonWords = []string{
	"password", "passwd", "passw0rd", "qwerty", "asdf", "zxcv", "letmein", "welcome", "changeme", "iloveyou",
	"monkey", "dragon", "master", "secret", "default", "example", "sunshine", "princess", "football",
	"baseball", "trustno1", "login", "abc", "admin",
}

// TokenBits estimates how many bits of guesswork a token holds, as a guesser who knows how people pick
// secrets would count them: each character costs the bits of the alphabet its classes suggest (16 for
// hex digits, 10 for digits, 26 or 52 for letters, more with other signs); a character that carries
// on a run (aaa, 123, cba) costs one bit; a common password word costs a pick from a short list and a
// bit for its case. A random token scores its full length times the alphabet's bits.
func TokenBits(tok string) float64 {
	perChar := math.Log2(float64(alphabet(tok)))
	wordBits := math.Log2(float64(len(commonWords))) + 1
	lower := strings.ToLower(tok)
	bits := 0.0
	for i := 0; i < len(tok); {
		if n := commonWordAt(lower[i:]); n > 0 {
			bits += wordBits
			i += n
			continue
		}
		if i >= 2 && continuesRun(tok[i-2], tok[i-1], tok[i]) {
			bits++
		} else {
			bits += perChar
		}
		i++
	}
	return bits
}

// commonWordAt returns the length of the longest common word s starts with, or 0.
func commonWordAt(s string) int {
	n := 0
	for _, w := range commonWords {
		if len(w) > n && strings.HasPrefix(s, w) {
			n = len(w)
		}
	}
	return n
}

// continuesRun reports whether c carries on the run a, b: the same character again, or the next one up
// or down.
func continuesRun(a, b, c byte) bool {
	d := int(b) - int(a)
	return d >= -1 && d <= 1 && int(c)-int(b) == d
}

// alphabet is the size of the smallest alphabet of the usual kinds that holds every character of tok.
func alphabet(tok string) int {
	var digit, lower, upper, other, hexLower, hexUpper bool
	hexLower, hexUpper = true, true
	for i := 0; i < len(tok); i++ {
		switch ch := tok[i]; {
		case ch >= '0' && ch <= '9':
			digit = true
		case ch >= 'a' && ch <= 'z':
			lower, hexUpper = true, false
			hexLower = hexLower && ch <= 'f'
		case ch >= 'A' && ch <= 'Z':
			upper, hexLower = true, false
			hexUpper = hexUpper && ch <= 'F'
		default:
			other, hexLower, hexUpper = true, false, false
		}
	}
	if hexLower || hexUpper {
		if !lower && !upper {
			return 10
		}
		return 16
	}
	n := 0
	for _, c := range []struct {
		in   bool
		size int
	}{{digit, 10}, {lower, 26}, {upper, 26}, {other, 32}} {
		if c.in {
			n += c.size
		}
	}
	return n
}
