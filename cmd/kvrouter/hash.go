package main

import (
	"context"
	"fmt"
	"io"
)

func runHash(_ context.Context, args []string, _, stderr io.Writer) error {
	fs := newFlagSet("hash", "--algo sha256|sha256_cbor --seed S --block-size N [--lora NAME] [--salt SALT]", stderr)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	return fmt.Errorf("hash: %w", errNotYet)
}
