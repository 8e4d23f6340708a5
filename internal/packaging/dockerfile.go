package packaging

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
)

// Instruction is one instruction of a Dockerfile, continuation lines
// joined.
type Instruction struct {
	Line int    // where it starts
	Cmd  string // upper case: RUN, COPY, ENV, …
	Args string // the rest, as written
}

// Stage is one FROM of a Dockerfile and the instructions under it.
type Stage struct {
	Line   int
	Image  string // as written after FROM
	Name   string // after AS, if any
	Instrs []Instruction
}

// ParseDockerfile reads the instructions of a Dockerfile, stage by stage:
// comments dropped, continuation lines (ending in \) joined. It knows
// Docker's syntax, not its semantics: it is for tests that hold a
// Dockerfile to rules.
func ParseDockerfile(src string) ([]Stage, error) {
	var stages []Stage
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue // comments may sit inside a continued instruction too
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		text := cur.String()
		cur.Reset()
		word, args, _ := strings.Cut(text, " ")
		in := Instruction{Line: start, Cmd: strings.ToUpper(word), Args: strings.TrimSpace(args)}
		if in.Cmd == "FROM" {
			st := Stage{Line: start}
			f := strings.Fields(in.Args)
			for i, w := range f {
				if strings.HasPrefix(w, "--") {
					continue // --platform=…
				}
				st.Image = w
				if i+2 < len(f) && strings.EqualFold(f[i+1], "AS") {
					st.Name = f[i+2]
				}
				break
			}
			if st.Image == "" {
				return nil, fmt.Errorf("line %d: FROM without an image", start)
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if in.Cmd == "ARG" {
				continue // allowed before the first FROM
			}
			return nil, fmt.Errorf("line %d: %s before the first FROM", start, in.Cmd)
		}
		stages[len(stages)-1].Instrs = append(stages[len(stages)-1].Instrs, in)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("the last instruction ends in a continuation")
	}
	return stages, nil
}

// All is the stage's instructions of one kind, in order.
func (s Stage) All(cmd string) []Instruction {
	var out []Instruction
	for _, in := range s.Instrs {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// Last is the stage's last instruction of one kind: the one that counts
// for USER, CMD, ENTRYPOINT and HEALTHCHECK.
func (s Stage) Last(cmd string) (Instruction, bool) {
	all := s.All(cmd)
	if len(all) == 0 {
		return Instruction{}, false
	}
	return all[len(all)-1], true
}

// Env is the stage's ENV settings (KEY=VALUE forms, and the legacy
// KEY VALUE). Values are unquoted; variables in them are not expanded.
func (s Stage) Env() map[string]string {
	env := map[string]string{}
	for _, in := range s.All("ENV") {
		f := strings.Fields(in.Args)
		if len(f) > 0 && !strings.Contains(f[0], "=") {
			env[f[0]] = strings.TrimSpace(strings.TrimPrefix(in.Args, f[0]))
			continue
		}
		for _, kv := range f {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = strings.Trim(v, `"'`)
		}
	}
	return env
}

// Words is the instruction's arguments in exec (JSON array) form, or split
// on spaces in shell form.
func (in Instruction) Words() []string {
	if strings.HasPrefix(in.Args, "[") {
		var w []string
		if err := json.Unmarshal([]byte(in.Args), &w); err == nil {
			return w
		}
	}
	return strings.Fields(in.Args)
}
