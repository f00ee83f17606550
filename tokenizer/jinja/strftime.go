package jinja

import (
	"fmt"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime in the C locale.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		b.WriteString(strftimeVerb(t, f[i]))
	}
	return b.String()
}

func strftimeVerb(t time.Time, c byte) string {
	switch c {
	case 'd':
		return fmt.Sprintf("%02d", t.Day())
	case 'e':
		return fmt.Sprintf("%2d", t.Day())
	case 'm':
		return fmt.Sprintf("%02d", int(t.Month()))
	case 'Y':
		return fmt.Sprintf("%d", t.Year())
	case 'y':
		return fmt.Sprintf("%02d", t.Year()%100)
	case 'H':
		return fmt.Sprintf("%02d", t.Hour())
	case 'I':
		return fmt.Sprintf("%02d", (t.Hour()+11)%12+1)
	case 'M':
		return fmt.Sprintf("%02d", t.Minute())
	case 'S':
		return fmt.Sprintf("%02d", t.Second())
	case 'p':
		if t.Hour() < 12 {
			return "AM"
		}
		return "PM"
	case 'b', 'h':
		return t.Month().String()[:3]
	case 'B':
		return t.Month().String()
	case 'a':
		return t.Weekday().String()[:3]
	case 'A':
		return t.Weekday().String()
	case 'j':
		return fmt.Sprintf("%03d", t.YearDay())
	case 'F':
		return t.Format("2006-01-02")
	case '%':
		return "%"
	}
	return "%" + string(c)
}
