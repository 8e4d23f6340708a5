package backend_test

import (
	"testing"

	"github.com/reinhq/rein/store/backend"
)

func TestRedact(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"postgres://postgres:s3cretPW@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres:xxxxx@127.0.0.1:5432/test?sslmode=disable"},
		{"postgresql://u:p%40ss@db.example.com/rein", "postgresql://u:xxxxx@db.example.com/rein"},
		{"POSTGRES://u:pw@h/db", "POSTGRES://u:xxxxx@h/db"},
		// An unescaped '@' or '/' in the password: the DSN does not parse,
		// and its password still must not show.
		{"postgres://u:p@ss/w@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u:@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h/db", "postgres://h/db"},
		{"postgres://h1,h2/db?target_session_attrs=read-write", "postgres://h1,h2/db?target_session_attrs=read-write"},
		{"postgres://u@h/db?sslmode=require&password=hunter2&x=1", "postgres://u@h/db?sslmode=require&password=xxxxx&x=1"},
		{"postgres://u:a@h/db?password=b", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"host=db user=rein password=s3cret dbname=rein", "host=db user=rein password=xxxxx dbname=rein"},
		{"host=db password = 's3 cr\\'et' dbname=rein", "host=db password = xxxxx dbname=rein"},
		{"host=db PASSWORD=x", "host=db PASSWORD=xxxxx"},
		{"host=db password=", "host=db password=xxxxx"},
		{"host=db sslpassword=k", "host=db sslpassword=k"},
		{"sqlite:./password=1.db", "sqlite:./password=1.db"},
		{"sqlite:./rein.db", "sqlite:./rein.db"},
		{"memory:", "memory:"},
		{"", ""},
	} {
		if got := backend.Redact(c.spec); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.spec, got, c.want)
		}
	}
}
