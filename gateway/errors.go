package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ErrInvalidConfig wraps every refusal of a Config.
var ErrInvalidConfig = errors.New("gateway: invalid config")

// The error types of OpenAI's error object.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

// apiError is an error answered as OpenAI answers errors: the HTTP status
// and {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string // "" encodes as null
	Code    string // "" encodes as null
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

// invalid is a 400 invalid_request_error naming param.
func invalid(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// notFound is a 404 invalid_request_error.
func notFound(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// serverError is a 500 (or status) server_error that says what failed; the
// cause is logged, and said, since the gateway's callers run the cluster.
func serverError(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Type: typeServer, Message: fmt.Sprintf(format, args...)}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// writeError answers err in OpenAI's error shape; an error that is not an
// *apiError is a 500 server_error with its text.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = serverError(http.StatusInternalServerError, "%v", err)
	}
	body := map[string]any{"error": map[string]any{
		"message": ae.Message,
		"type":    ae.Type,
		"param":   nullable(ae.Param),
		"code":    nullable(ae.Code),
	}}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rollout"`)
	}
	writeJSON(w, ae.Status, body)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
