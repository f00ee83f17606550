package jinja

import "testing"

// TestToJSONRoundTrip checks that ToJSON writes what json.dumps writes for
// values FromJSON read, so a context survives the trip to other oracles.
func TestToJSONRoundTrip(t *testing.T) {
	for _, in := range []string{
		`{"b": [1, 2.0, null, true, false, "é\"\n"], "a": {}, "c": -0.0, "d": 1e+100, "e": []}`,
		`[{"z": 1, "a": 2}, 0.1, -7, 123456789012345678]`,
		`"x"`,
		`null`,
	} {
		v, err := FromJSON([]byte(in))
		if err != nil {
			t.Fatalf("FromJSON(%s): %v", in, err)
		}
		got, err := ToJSON(v)
		if err != nil || got != in {
			t.Errorf("ToJSON(FromJSON(%s)) = %s, %v; want it unchanged", in, got, err)
		}
	}
	if _, err := ToJSON(Undefined{Name: "x"}); err == nil {
		t.Errorf("ToJSON(Undefined) succeeded; want an error")
	}
}
