package shortener

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The alphabet of codes, in ASCII order, so that codes of one length sort like the numbers they spell.
const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// MaxCodeLen is the length of the longest code: 2^63-1 in base 62 has 11 digits.
const MaxCodeLen = 11

// feistelRounds is the number of Feistel rounds. Four make a keyed permutation out of a keyed function
// (Luby–Rackoff); more widen the margin for a domain of only 64 bits.
const feistelRounds = 8

var (
	// ErrInvalidCode means a string is not a code that Encode could have made: 1 to 11 characters of
	// 0-9, A-Z and a-z, no leading '0', at most 2^63-1 in base 62.
	ErrInvalidCode = errors.New("shortener: invalid code")
	// ErrInvalidID means an ID is below 1; ticketd never issues one.
	ErrInvalidID = errors.New("shortener: invalid ID")
)

// A Codec turns link IDs into short codes and back. Scrambled (NewCodec), the code is the ID after a
// keyed permutation of [1, 2^63-1], written in base 62, so that consecutive IDs, which ticketd hands out
// in order, give unrelated codes and a code does not tell how many links exist. Plain (PlainCodec), the
// code is the ID in base 62.
//
// The permutation is a Feistel network over 64 bits whose round function is AES-128 under a key derived
// from the scramble key; a result outside [1, 2^63-1] is put through the network again ("cycle
// walking") until it falls inside. A Feistel network is a bijection whatever its round function, and
// cycle walking keeps it one on the subset, so two IDs never share a code. Without the key, codes cannot
// be mapped back to IDs; anyone who knows the key can.
//
// A Codec is safe for concurrent use.
type Codec struct {
	block cipher.Block // nil: plain
}

// NewCodec returns a scrambling Codec keyed by key (any string; keep it secret, and never change it
// once links exist, or new codes may collide with old ones).
func NewCodec(key string) *Codec {
	sum := sha256.Sum256([]byte("ticketd shortener code key v1\x00" + key))
	block, err := aes.NewCipher(sum[:16])
	if err != nil {
		panic(err) // unreachable: 16 bytes is a valid AES key size
	}
	return &Codec{block: block}
}

// PlainCodec returns a Codec whose codes are the IDs in base 62, in order.
func PlainCodec() *Codec { return &Codec{} }

// Scrambled reports whether the Codec permutes IDs before encoding them.
func (c *Codec) Scrambled() bool { return c.block != nil }

// Encode returns the code of an ID; ErrInvalidID when id < 1.
func (c *Codec) Encode(id int64) (string, error) {
	if id < 1 {
		return "", fmt.Errorf("%w: %d; IDs start at 1", ErrInvalidID, id)
	}
	return base62(c.scramble(uint64(id))), nil
}

// Decode returns the ID whose code is code, or ErrInvalidCode when no ID has that code.
func (c *Codec) Decode(code string) (int64, error) {
	v, err := parseBase62(code)
	if err != nil {
		return 0, err
	}
	return int64(c.unscramble(v)), nil
}

func (c *Codec) scramble(x uint64) uint64   { return c.walk(x, false) }
func (c *Codec) unscramble(x uint64) uint64 { return c.walk(x, true) }

// walk applies the network (or its inverse) to an ID until the result is one too. It ends: x lies on a
// cycle of the network's permutation, and going round it leads back to x at the latest.
func (c *Codec) walk(x uint64, inverse bool) uint64 {
	if c.block == nil {
		return x
	}
	var buf [32]byte
	for {
		x = c.feistel(x, &buf, inverse)
		if inDomain(x) {
			return x
		}
	}
}

// inDomain reports whether x is a possible ID: 1 to 2^63-1.
func inDomain(x uint64) bool { return x != 0 && x <= math.MaxInt64 }

// feistel applies the network to x (or undoes it): each round swaps the halves and mixes a keyed
// function of one half into the other, which the inverse round can undo without inverting the function.
func (c *Codec) feistel(x uint64, buf *[32]byte, inverse bool) uint64 {
	l, r := uint32(x>>32), uint32(x)
	for i := range feistelRounds {
		if inverse {
			round := feistelRounds - 1 - i
			l, r = r^c.round(round, l, buf), l
		} else {
			l, r = r, l^c.round(i, r, buf)
		}
	}
	return uint64(l)<<32 | uint64(r)
}

// round is the keyed round function: the first 32 bits of AES(round number, half).
func (c *Codec) round(i int, half uint32, buf *[32]byte) uint32 {
	in, out := buf[:16], buf[16:]
	clear(in)
	in[0] = byte(i)
	binary.BigEndian.PutUint32(in[1:], half)
	c.block.Encrypt(out, in)
	return binary.BigEndian.Uint32(out)
}

// base62 writes v (at least 1) in base 62 with no leading zero.
func base62(v uint64) string {
	var b [MaxCodeLen]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = alphabet[v%62]
		v /= 62
	}
	return string(b[i:])
}

// digit is the value of each byte in base 62, or -1.
var digit = func() (d [256]int8) {
	for i := range d {
		d[i] = -1
	}
	for i := range len(alphabet) {
		d[alphabet[i]] = int8(i)
	}
	return d
}()

// parseBase62 reads a code that base62 could have written: a value in [1, 2^63-1], no leading zero.
func parseBase62(code string) (uint64, error) {
	if code == "" || len(code) > MaxCodeLen {
		return 0, fmt.Errorf("%w: %q must be 1 to %d characters long", ErrInvalidCode, clip(code), MaxCodeLen)
	}
	if code[0] == '0' {
		return 0, fmt.Errorf("%w: %q starts with 0, which no code does", ErrInvalidCode, clip(code))
	}
	var v uint64
	for i := 0; i < len(code); i++ {
		d := digit[code[i]]
		if d < 0 {
			return 0, fmt.Errorf("%w: %q may only hold the letters a-z, A-Z and the digits 0-9", ErrInvalidCode, clip(code))
		}
		// 11 digits of base 62 can exceed 2^64; stop as soon as v passes 2^63-1.
		if v > (math.MaxInt64-uint64(d))/62 {
			return 0, fmt.Errorf("%w: %q is beyond the largest code", ErrInvalidCode, clip(code))
		}
		v = v*62 + uint64(d)
	}
	return v, nil
}

// clip shortens what goes back into an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
