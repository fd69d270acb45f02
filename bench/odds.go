package bench

import (
	"fmt"
	"math"
	"time"
)

// year is the period the collision odds are given for.
const year = 365 * 24 * time.Hour

// referenceRate is the rate the article quotes its odds at, given beside the measured one.
const referenceRate = 1e6

// OddsRow is one scheme's chance of a collision in a year of issuing IDs at a steady rate.
type OddsRow struct {
	Scheme string `json:"scheme"`
	// RandomBits is what must match, within one Window of the time prefix (none: the whole ID), for two
	// IDs from independent generators to collide. Zero for coordinated schemes.
	RandomBits int    `json:"random_bits"`
	Window     string `json:"window,omitempty"`
	// Rate is the IDs/s this run measured for the scheme; PYear the chance of at least one collision in a
	// year at that rate; PYearReference the same at 1,000,000 IDs/s.
	Rate           float64 `json:"rate"`
	PYear          float64 `json:"p_year"`
	PYearReference float64 `json:"p_year_at_1m_per_s"`
	// Coordination says what keeps a coordinated scheme unique (its P is 0 only while that holds).
	Coordination string `json:"coordination,omitempty"`
}

// collisionChance is P(at least one collision) among IDs issued at rate for period, when IDs of one
// window share their time prefix and differ only in bits random bits: per window n²/2^(b+1) (the
// birthday bound), summed over the windows as a Poisson rate.
func collisionChance(bits int, window time.Duration, rate float64, period time.Duration) float64 {
	if bits == 0 || rate <= 0 {
		return 0
	}
	windows, n := 1.0, rate*period.Seconds()
	if window > 0 {
		windows = period.Seconds() / window.Seconds()
		n = rate * window.Seconds()
	}
	lambda := windows * n * n / math.Exp2(float64(bits+1))
	return -math.Expm1(-lambda)
}

func odds(s scheme, rate float64) OddsRow {
	r := OddsRow{Scheme: s.name, RandomBits: s.randomBits, Rate: rate, Coordination: s.coordination}
	if s.window > 0 {
		r.Window = s.window.String()
	}
	r.PYear = collisionChance(s.randomBits, s.window, rate, year)
	r.PYearReference = collisionChance(s.randomBits, s.window, referenceRate, year)
	return r
}

// oneIn writes a probability the way people compare them: "1 in 1.2 million".
func oneIn(p float64) string {
	switch {
	case p == 0:
		return "0"
	case p > 0.5:
		return fmt.Sprintf("%.2f", p)
	}
	return "1 in " + bigNumber(1/p)
}

// bigNumber writes a large count with a word: 1.2 million, 77 billion, 3.4e+21.
func bigNumber(x float64) string {
	for _, u := range []struct {
		v    float64
		name string
	}{{1e18, "quintillion"}, {1e15, "quadrillion"}, {1e12, "trillion"}, {1e9, "billion"}, {1e6, "million"}} {
		if x >= u.v {
			if x >= 1000*1e18 {
				return fmt.Sprintf("%.2g", x)
			}
			return fmt.Sprintf("%.3g %s", x/u.v, u.name)
		}
	}
	return count(int64(math.Round(x)))
}
