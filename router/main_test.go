package router

import (
	"os"
	"testing"
)

// TestMain checks the homes' bookkeeping after every operation on the
// table in every test of the package.
func TestMain(m *testing.M) {
	checkHomes = true
	os.Exit(m.Run())
}
