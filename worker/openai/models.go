package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rollout/rollout/internal/limits"
)

// maxModelsResponseBytes bounds how much of a GET /v1/models answer is read.
const maxModelsResponseBytes = 4 << 20

// modelList is GET /v1/models' answer in the OpenAI shape:
// {"object": "list", "data": [{"id": "...", "object": "model", ...}]}.
type modelList struct {
	Object string `json:"object"`
	Data   []struct {
		ID string `json:"id"`
	} `json:"data"`
}

// Models asks the server which models it serves (GET /v1/models, with the
// API key when one is set) and returns their ids, sorted and without
// repeats. It sends one request bounded by Config.RequestTimeout, without
// retries. An error wraps ErrModels: the server could not be reached, the
// answer is not 200, is not the OpenAI list shape, lists no model, lists
// more than limits.MaxWorkerModels, or lists an id that is empty, not
// printable UTF-8 or longer than limits.MaxModelBytes (the ledger would refuse
// it). A worker serves the models it returns (rollout-worker --backend
// openai without --models); on an error it serves every model.
func (b *Backend) Models(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	target := b.base.JoinPath("v1", "models").String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrModels, err)
	}
	req.Header.Set("Accept", "application/json")
	if b.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.APIKey)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrModels, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: reading the answer: %v", ErrModels, target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: status %d: %s", ErrModels, target, resp.StatusCode, serverMessage(data))
	}
	if len(data) > maxModelsResponseBytes {
		return nil, fmt.Errorf("%w: GET %s: the answer is larger than %d bytes", ErrModels, target, maxModelsResponseBytes)
	}
	return parseModels(data)
}

// parseModels decodes a GET /v1/models answer (see Models).
func parseModels(data []byte) ([]string, error) {
	var l modelList
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("%w: the answer is not an OpenAI model list: %v", ErrModels, err)
	}
	if l.Object != "list" {
		return nil, fmt.Errorf("%w: the answer's object is %q, want \"list\"", ErrModels, l.Object)
	}
	if len(l.Data) == 0 {
		return nil, fmt.Errorf("%w: the server lists no model", ErrModels)
	}
	if len(l.Data) > limits.MaxWorkerModels {
		return nil, fmt.Errorf("%w: the server lists %d models, more than a worker may serve (%d)", ErrModels, len(l.Data), limits.MaxWorkerModels)
	}
	out := make([]string, 0, len(l.Data))
	for i, m := range l.Data {
		switch {
		case m.ID == "":
			return nil, fmt.Errorf("%w: model %d has no id", ErrModels, i)
		case len(m.ID) > limits.MaxModelBytes:
			return nil, fmt.Errorf("%w: model %d's id is %d bytes, limit %d", ErrModels, i, len(m.ID), limits.MaxModelBytes)
		case !utf8.ValidString(m.ID) || strings.ContainsFunc(m.ID, func(r rune) bool { return !unicode.IsPrint(r) }):
			return nil, fmt.Errorf("%w: model %d's id %q is not printable UTF-8", ErrModels, i, m.ID)
		}
		out = append(out, m.ID)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
