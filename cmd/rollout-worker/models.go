package main

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/worker"
)

// modelsDiscoveryTimeout bounds the start-up question to an openai
// backend's server about its models.
const modelsDiscoveryTimeout = 10 * time.Second

// modelLister is a backend that can ask its server which models it serves
// (the openai backend: GET /v1/models).
type modelLister interface {
	Models(ctx context.Context) ([]string, error)
}

// checkModelsFlag validates --models: at least one name, each non-empty (after trimming
// spaces), printable UTF-8 of at most limits.MaxModelBytes, at most
// limits.MaxWorkerModels of them (the ledger's bounds).
func checkModelsFlag(given []string) ([]string, error) {
	if len(given) == 0 {
		return nil, usagef("--models: no model given (leave the flag out to serve every model)")
	}
	if len(given) > limits.MaxWorkerModels {
		return nil, usagef("--models: %d models, at most %d", len(given), limits.MaxWorkerModels)
	}
	out := make([]string, 0, len(given))
	for i, m := range given {
		m = strings.TrimSpace(m)
		switch {
		case m == "":
			return nil, usagef("--models: model %d is empty", i+1)
		case len(m) > limits.MaxModelBytes:
			return nil, usagef("--models: model %d is %d bytes, at most %d", i+1, len(m), limits.MaxModelBytes)
		case !utf8.ValidString(m) || strings.ContainsFunc(m, func(r rune) bool { return !unicode.IsPrint(r) }):
			return nil, usagef("--models: model %d %q is not printable UTF-8", i+1, m)
		}
		out = append(out, m)
	}
	return out, nil
}

// workerModels returns the models the worker registers (nil: every
// model). With --models (given, set), the names given, validated. Without
// it, a backend that can list its server's models (the openai backend) is
// asked once, within modelsDiscoveryTimeout: the worker serves what the
// server lists; when the question fails, it serves every model and says so
// in the log. Any other backend serves every model.
func workerModels(ctx context.Context, given []string, set bool, b worker.Backend, log hclog.Logger) ([]string, error) {
	if set {
		return checkModelsFlag(given)
	}
	l, ok := b.(modelLister)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, modelsDiscoveryTimeout)
	defer cancel()
	models, err := l.Models(ctx)
	if err != nil {
		log.Warn("could not learn the server's models (GET /v1/models); serving every model (give --models to choose)", "error", err)
		return nil, nil
	}
	log.Info("serving the models the server lists", "models", strings.Join(models, ","))
	return models, nil
}

// modelsText names a model set for the log.
func modelsText(models []string) string {
	if models == nil {
		return "every model"
	}
	return strings.Join(models, ",")
}
