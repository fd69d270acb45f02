package links

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// The alphabet of codes, in ASCII order, so that codes of one length sort like the numbers they spell.
const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// MaxCodeLen is the length of the longest code: 2^63-1 in base 62 has 11 digits.
const MaxCodeLen = 11

// MinCodeLen is the shortest code length a Codec can be limited to (WithLength): 62^4-1, about 14.8
// million links.
const MinCodeLen = 4

// feistelRounds is the number of Feistel rounds. Four make a keyed permutation out of a keyed function
// (Luby–Rackoff); more widen the margin for a domain of only 64 bits.
const feistelRounds = 8

var (
	// ErrInvalidCode means a string is not a code that Encode could have made: 1 to 11 characters of
	// 0-9, A-Z and a-z, no leading '0', at most 2^63-1 in base 62.
	ErrInvalidCode = errors.New("shortener: invalid code")
	// ErrInvalidID means an ID is below 1; ticketd never issues one.
	ErrInvalidID = errors.New("shortener: invalid ID")
	// ErrCodesExhausted means an ID is above the largest one a code of the Codec's length can hold
	// (MaxID): every code of that length is taken.
	ErrCodesExhausted = errors.New("shortener: every code is taken")
)

// A Codec turns link IDs into short codes and back. Scrambled (NewCodec), the code is the ID after a
// keyed permutation of [1, MaxID], written in base 62, so that consecutive IDs, which ticketd hands out
// in order, give unrelated codes and a code does not tell how many links exist. Plain (PlainCodec), the
// code is the ID in base 62. A Codec's codes are at most MaxCodeLen characters, and its IDs up to
// 2^63-1; WithLength limits both, to codes of at most n characters and IDs up to 62^n-1.
//
// The permutation is a balanced Feistel network over the fewest even number of bits that holds MaxID
// (64 for the full length), whose round function is AES-128 under a key derived from the scramble key;
// a result outside [1, MaxID] is put through the network again ("cycle walking") until it falls inside,
// less than four times on average. A Feistel network is a bijection whatever its round function, and
// cycle walking keeps it one on the subset, so two IDs never share a code. Without the key, codes cannot
// be mapped back to IDs; anyone who knows the key can.
//
// A Codec is safe for concurrent use.
type Codec struct {
	block  cipher.Block // nil: plain
	length int          // the longest code
	maxID  uint64       // the largest ID: 62^length-1, or 2^63-1 at MaxCodeLen
	half   uint         // bits in each half of the Feistel network
}

// NewCodec returns a scrambling Codec keyed by key (any string; keep it secret, and never change it
// once links exist, or new codes may collide with old ones).
func NewCodec(key string) *Codec {
	sum := sha256.Sum256([]byte("ticketd shortener code key v1\x00" + key))
	block, err := aes.NewCipher(sum[:16])
	if err != nil {
		panic(err) // unreachable: 16 bytes is a valid AES key size
	}
	return newCodec(block, MaxCodeLen)
}

// PlainCodec returns a Codec whose codes are the IDs in base 62, in order.
func PlainCodec() *Codec { return newCodec(nil, MaxCodeLen) }

// newCodec returns the Codec of codes of at most length characters (1 to MaxCodeLen).
func newCodec(block cipher.Block, length int) *Codec {
	maxID := uint64(math.MaxInt64)
	if length < MaxCodeLen {
		maxID = pow62(length) - 1
	}
	half := uint(bits.Len64(maxID)+1) / 2
	return &Codec{block: block, length: length, maxID: maxID, half: half}
}

// WithLength returns a Codec like c whose codes are at most n characters long (MinCodeLen to
// MaxCodeLen), for the IDs 1 to 62^n-1 (MaxID): a bijection on exactly those IDs. At MaxCodeLen it is
// c itself. The codes of one key differ from one length to another: choose it before the first link.
func (c *Codec) WithLength(n int) (*Codec, error) {
	if n < MinCodeLen || n > MaxCodeLen {
		return nil, fmt.Errorf("shortener: a code length of %d; it must be %d to %d", n, MinCodeLen, MaxCodeLen)
	}
	if n == c.length {
		return c, nil
	}
	return newCodec(c.block, n), nil
}

// Length is the length of the longest code.
func (c *Codec) Length() int { return c.length }

// MaxID is the largest ID that has a code: 62^Length()-1, or 2^63-1 at MaxCodeLen.
func (c *Codec) MaxID() int64 { return int64(c.maxID) }

// pow62 is 62^n, for n up to 10.
func pow62(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 62
	}
	return p
}

// Scrambled reports whether the Codec permutes IDs before encoding them.
func (c *Codec) Scrambled() bool { return c.block != nil }

// Encode returns the code of an ID; ErrInvalidID when id < 1.
func (c *Codec) Encode(id int64) (string, error) {
	if id < 1 {
		return "", fmt.Errorf("%w: %d; IDs start at 1", ErrInvalidID, id)
	}
	if uint64(id) > c.maxID {
		return "", fmt.Errorf("%w: ID %d is above %d, the largest a code of %d characters holds", ErrCodesExhausted, id, c.maxID, c.length)
	}
	return base62(c.scramble(uint64(id))), nil
}

// Decode returns the ID whose code is code, or ErrInvalidCode when no ID has that code.
func (c *Codec) Decode(code string) (int64, error) {
	if len(code) > c.length {
		return 0, fmt.Errorf("%w: %q must be 1 to %d characters long", ErrInvalidCode, clip(code), c.length)
	}
	v, err := parseBase62(code)
	if err != nil {
		return 0, err
	}
	if v > c.maxID {
		return 0, fmt.Errorf("%w: %q is beyond the largest code", ErrInvalidCode, clip(code))
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
		if x != 0 && x <= c.maxID {
			return x
		}
	}
}

// feistel applies the network of 2×c.half bits to x (or undoes it): each round swaps the halves and
// mixes a keyed function of one half into the other, which the inverse round can undo without
// inverting the function.
func (c *Codec) feistel(x uint64, buf *[32]byte, inverse bool) uint64 {
	mask := uint64(1)<<c.half - 1
	l, r := x>>c.half&mask, x&mask
	for i := range feistelRounds {
		if inverse {
			round := feistelRounds - 1 - i
			l, r = r^c.round(round, l, buf)&mask, l
		} else {
			l, r = r, l^c.round(i, r, buf)&mask
		}
	}
	return l<<c.half | r
}

// round is the keyed round function: the first 32 bits of AES(round number, half, 32 - bits in a
// half). The last byte is zero in the 64-bit network, whose codes stay those of every earlier version.
func (c *Codec) round(i int, half uint64, buf *[32]byte) uint64 {
	in, out := buf[:16], buf[16:]
	clear(in)
	in[0] = byte(i)
	binary.BigEndian.PutUint32(in[1:], uint32(half))
	in[5] = byte(32 - c.half)
	c.block.Encrypt(out, in)
	return uint64(binary.BigEndian.Uint32(out))
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
