// Package jsonscan walks the top-level members of a JSON object without a
// decoder: the fast path shared by the checks of an item's payload
// (api/validate.JSONObject) and the batch front door's object parser
// (batch.ParseLine), which must accept exactly the same objects. It does not
// validate: its input is already known to be one valid JSON value
// (json.Valid), and anything it does not handle (another kind of value, a
// key written with an escape) it leaves to the caller's decoder, which then
// decides and explains.
package jsonscan

import "bytes"

// Members calls yield for each top-level member of data, in order, with
// the key as written between its quotes (data[keyStart:keyEnd], quotes not
// included) and the value as written (data[valStart:valEnd]). data must be
// one valid JSON value, optionally surrounded by JSON white space.
//
// It returns true when data is an object (possibly empty) and yield
// accepted every member. It returns false, stopping at once, when data is
// not an object, when a key holds a backslash (its unescaped form would
// have to be compared), or when yield returned false. It allocates nothing.
func Members(data []byte, yield func(keyStart, keyEnd, valStart, valEnd int) bool) bool {
	i := Space(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = Space(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) {
		// data[i] is the '"' of a key (the value is valid JSON).
		end := i + 1
		for end < len(data) && data[end] != '"' {
			if data[end] == '\\' {
				return false
			}
			end++
		}
		v := Space(data, Space(data, end+1)+1) // past the ':'
		vend := Value(data, v)
		if !yield(i+1, end, v, vend) {
			return false
		}
		i = Space(data, vend) // at ',' or '}'
		if i >= len(data) || data[i] == '}' {
			return true
		}
		i = Space(data, i+1)
	}
	return false
}

// Space returns the index of the first byte at or after i that is not JSON
// white space (len(data) if none).
func Space(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// Value returns the index just past the valid JSON value that starts at i:
// a string, an object or array (to its matching bracket, skipping strings),
// or a literal or number (to the next delimiter).
func Value(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch data[i] {
		case '"':
			i = skipString(data, i+1)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

// skipString returns the index just past the closing quote of the valid
// string whose contents start at i (len(data) when there is none): the
// first '"' after an even number of backslashes, found with
// bytes.IndexByte (many bytes a step).
func skipString(data []byte, i int) int {
	for {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return len(data)
		}
		j := i + q
		k := j
		for k > i && data[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1 // an escaped quote
	}
}
