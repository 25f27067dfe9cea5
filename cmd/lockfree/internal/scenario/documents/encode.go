package documents

import "encoding/json"

// encode is json.Marshal for the outputs of the history models, which
// always encode.
func encode(v any) (json.RawMessage, error) { return json.Marshal(v) }
