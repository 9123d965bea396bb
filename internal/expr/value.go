package expr

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// Native converts a CEL value to a JSON-compatible Go value: bool, int64,
// uint64, float64, string, nil, []any and map[string]any. Bytes become a
// string when they are valid UTF-8, timestamps a time.Time, durations
// their text ("1m30s"), an empty optional nil. Map keys that are not
// strings are rendered as text.
func Native(v ref.Val) (any, error) {
	return native(v, 0)
}

// maxNativeDepth bounds the nesting Native follows.
const maxNativeDepth = 100

func native(v ref.Val, depth int) (any, error) {
	if depth > maxNativeDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxNativeDepth)
	}
	switch x := v.(type) {
	case nil:
		return nil, nil
	case *types.Err:
		return nil, x
	case *types.Unknown:
		return nil, fmt.Errorf("value is unknown")
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		return float64(x), nil
	case types.String:
		return string(x), nil
	case types.Bytes:
		if utf8.Valid(x) {
			return string(x), nil
		}
		return []byte(x), nil
	case types.Null:
		return nil, nil
	case types.Timestamp:
		return x.Time.UTC(), nil
	case types.Duration:
		return x.Duration.String(), nil
	case *types.Optional:
		if !x.HasValue() {
			return nil, nil
		}
		return native(x.GetValue(), depth+1)
	}
	if l, ok := v.(traits.Lister); ok {
		return nativeList(l, depth)
	}
	if m, ok := v.(traits.Mapper); ok {
		return nativeMap(m, depth)
	}
	if t, ok := v.(ref.Type); ok {
		return t.TypeName(), nil
	}
	return nil, fmt.Errorf("cannot convert a CEL %s to a plain value", v.Type().TypeName())
}

// nativeList is a CEL list as a []any.
func nativeList(l traits.Lister, depth int) (any, error) {
	size, ok := l.Size().(types.Int)
	if !ok {
		return nil, fmt.Errorf("list without a size")
	}
	out := make([]any, 0, int(size))
	it := l.Iterator()
	for it.HasNext() == types.True {
		e, err := native(it.Next(), depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// nativeMap is a CEL map as a map[string]any, its keys rendered as text.
func nativeMap(m traits.Mapper, depth int) (any, error) {
	out := map[string]any{}
	it := m.Iterator()
	for it.HasNext() == types.True {
		k := it.Next()
		val, found := m.Find(k)
		if !found {
			continue
		}
		nv, err := native(val, depth+1)
		if err != nil {
			return nil, err
		}
		nk, err := native(k, depth+1)
		if err != nil {
			return nil, err
		}
		key, ok := nk.(string)
		if !ok {
			key = Text(nk)
		}
		out[key] = nv
	}
	return out, nil
}

// Text renders a value for interpolation inside a longer string: strings
// as they are, numbers and booleans as in JSON (integral floats without a
// fraction), null as "null", timestamps in RFC 3339, lists and maps as
// compact JSON with sorted keys.
func Text(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// describe names the type of a Go value for messages.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a bool"
	case int64, uint64, int:
		return "an int"
	case float64:
		return "a double"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("a %T", v)
}
