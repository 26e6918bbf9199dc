package jsonscan

import "encoding/json"

// Valid reports whether data is one valid JSON value, with exactly the
// answers of encoding/json.Valid on every input.
func Valid(data []byte) bool { return json.Valid(data) }
