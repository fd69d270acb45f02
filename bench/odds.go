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
	// Space is what runs out first in the scheme's IDs (empty: nothing does, the IDs are all random);
	// YearsLeft is how long it lasts from the run's date at Rate, YearsLeftReference at 1,000,000
	// IDs/s. A clock field runs out on its date whatever the rate.
	Space              string  `json:"space,omitempty"`
	YearsLeft          float64 `json:"years_left,omitempty"`
	YearsLeftReference float64 `json:"years_left_at_1m_per_s,omitempty"`
}

// idSpace is what runs out first in a scheme's IDs: a counter of a fixed number of IDs, used up by
// issuing them, or a time field that ends on a date, whatever the rate (a generator past what one
// tick holds waits for the next). The zero value: nothing runs out.
type idSpace struct {
	what string
	ids  float64 // a counter: how many IDs it holds
	ends float64 // a clock: when its field runs out, in seconds since the Unix epoch
}

// counterSpace is a counter of bits bits (IDs 1 to 2^bits-1).
func counterSpace(bits int) idSpace {
	return idSpace{what: fmt.Sprintf("%d-bit counter", bits), ids: math.Exp2(float64(bits)) - 1}
}

// clockSpace is a time field of bits bits counting units since epoch.
func clockSpace(bits int, unit time.Duration, epoch time.Time) idSpace {
	u := unit.String()
	switch unit {
	case time.Millisecond:
		u = "ms"
	case time.Second:
		u = "s"
	}
	return idSpace{what: fmt.Sprintf("%d-bit %s clock from %s", bits, u, epoch.Format("2006-01-02")),
		ends: float64(epoch.Unix()) + math.Exp2(float64(bits))*unit.Seconds()}
}

// codeSpace is the URL shortener's codes of length base-62 characters: IDs 1 to 62^length-1, the
// max_id of its namespace.
func codeSpace(length int) idSpace {
	return idSpace{what: fmt.Sprintf("%d-character codes (62^%d-1 IDs)", length, length), ids: math.Pow(62, float64(length)) - 1}
}

// yearsLeft is how long the space lasts from now at rate IDs/s; 0 for a space that never runs out.
func (sp idSpace) yearsLeft(rate float64, now time.Time) float64 {
	switch {
	case sp.ids > 0 && rate > 0:
		return sp.ids / rate / year.Seconds()
	case sp.ends > 0:
		return (sp.ends - float64(now.Unix())) / year.Seconds()
	}
	return 0
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

// odds is a scheme's row of the collision table, at rate IDs/s and from now.
func odds(s scheme, rate float64, now time.Time) OddsRow {
	r := OddsRow{Scheme: s.name, RandomBits: s.randomBits, Rate: rate, Coordination: s.coordination, Space: s.space.what}
	if s.window > 0 {
		r.Window = s.window.String()
	}
	r.PYear = collisionChance(s.randomBits, s.window, rate, year)
	r.PYearReference = collisionChance(s.randomBits, s.window, referenceRate, year)
	r.YearsLeft = s.space.yearsLeft(rate, now)
	r.YearsLeftReference = s.space.yearsLeft(referenceRate, now)
	return r
}

// shortCodeLength is the code length of the shortener row beside the ticket row: 7 characters, the
// length short-link services use.
const shortCodeLength = 7

// shortCodes is the row of the shortener's codes of shortCodeLength characters over ticket IDs: the
// ticket row's rate and guarantees, and a space of 62^7-1 IDs.
func shortCodes(ticket scheme, rate float64, now time.Time) OddsRow {
	ticket.name = fmt.Sprintf("%s, as %d-character shortener codes", ticketRowName, shortCodeLength)
	ticket.coordination += fmt.Sprintf(", and a namespace max_id of 62^%d-1", shortCodeLength)
	ticket.space = codeSpace(shortCodeLength)
	return odds(ticket, rate, now)
}

// lasts writes a span of years the way people compare them: 4.8 hours, 40.8 days, 53.6 years,
// 292,471 years; "–" for none.
func lasts(years float64) string {
	d := years * year.Hours() / 24
	switch {
	case years <= 0:
		return "–"
	case d < 2:
		return fmt.Sprintf("%.1f hours", d*24)
	case years < 1:
		return fmt.Sprintf("%.1f days", d)
	case years < 1000:
		return fmt.Sprintf("%.1f years", years)
	}
	return bigNumber(math.Round(years)) + " years"
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
