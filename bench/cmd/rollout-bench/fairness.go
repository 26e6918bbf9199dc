package main

import "context"

// Fairness is the fairness stage (issue 30); filled in below.
type Fairness struct{}

func (b *bench) fairness(ctx context.Context) error { return nil }
