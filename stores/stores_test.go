package stores_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/runstate/runstate"
	"github.com/runstate/runstate/stores"
	_ "github.com/runstate/runstate/stores/all" // every scheme
)

// A store name is shown without its password, whichever scheme it has.
func TestStoreNamesAreRedacted(t *testing.T) {
	const pw = "s3cr3t-Pa55"
	cases := []struct{ name, in, keep string }{
		{"MySQL store", "mysql:runner:" + pw + "@tcp(db:3306)/runs?parseTime=true", "mysql:runner:<redacted>@tcp(db:3306)/runs?parseTime=true"},
		{"unparseable DSN", "mysql:runner:" + pw + "@tcp(db:3306)", "mysql:<unparseable DSN>"},
		{"URL-shaped store", "postgres://runner:" + pw + "@db/runs", "postgres://runner:<redacted>@db/runs"},
		{"PostgreSQL URL store", "postgres:postgres://runner:" + pw + "@db/runs?sslmode=disable", "postgres:postgres://runner:<redacted>@db/runs?sslmode=disable"},
		{"PostgreSQL keyword store", "postgres:host=db password=" + pw + " dbname=runs", "postgres:host=db password=<redacted> dbname=runs"},
		{"PostgreSQL quoted password", "postgres:host=db PassWord = '" + pw + " it\\'s' dbname=runs", "postgres:host=db PassWord = <redacted> dbname=runs"},
		{"PostgreSQL key password", "postgresql:host=db sslpassword=" + pw + " dbname=runs", "postgresql:host=db sslpassword=<redacted> dbname=runs"},
		{"unknown scheme", "runner:" + pw + "@tcp(db:3306)/runs", "runner:…"},
		{"Badger store", "badger:/var/lib/runs", "badger:/var/lib/runs"},
		{"gateway", "gateway:runs.example.com:7443", "gateway:runs.example.com:7443"},
	}
	for _, c := range cases {
		got := stores.Redact(c.in)
		if strings.Contains(got, pw) || got != c.keep {
			t.Errorf("%s: %q became %q, want %q", c.name, c.in, got, c.keep)
		}
	}
}

// Every shipped scheme is registered, and a bad name is refused with an
// ErrInvalidArgument that says what to give, without a secret.
func TestStoreNamesAreChecked(t *testing.T) {
	if got, want := stores.Forms(), "memory, badger:PATH, etcd:ENDPOINTS, gateway:HOST:PORT, mysql:DSN, plugin:PATH or postgres:DSN"; got != want {
		t.Errorf("forms %q, want %q", got, want)
	}
	for _, good := range []string{"memory", "badger:/tmp/s", "mysql:u:p@tcp(db:3306)/runs", "postgres:postgres://u@db/runs",
		"postgresql:host=db dbname=runs", "postgres://u:p@db:5432/runs", "postgresql://u@db/runs", "plugin:./p", "gateway:db:7443"} {
		if err := stores.Check(good); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", `"": want memory, badger:PATH`},
		{"oracle:hunter2", `"oracle:…": want memory, badger:PATH`},
		{"memory:extra", `"memory:extra": memory takes nothing after it; want memory`},
		{"badger:", "badger:PATH needs a directory, e.g. badger:.runstate/store"},
		{"mysql:", "mysql:DSN needs a DSN, e.g. mysql:user:password@tcp(host:3306)/database"},
		{"mysql:u:hunter2@tcp(db:3306)", "mysql:DSN: invalid DSN: missing the slash separating the database name; want mysql:user:password@tcp(host:3306)/database"},
		{"postgres:host=db password=hunter2 port=notaport", "postgres:DSN: the DSN does not parse"},
		{"postgres://u:hunter2@[::1", "postgres:DSN: the DSN does not parse"},
		{"plugin:", "plugin:PATH needs the plugin binary, e.g. plugin:./runstate-plugin-badger"},
		{"gateway:", "gateway:HOST:PORT needs the gateway's address, e.g. gateway:runs.example.com:7443"},
	} {
		err := stores.Check(c.in)
		if !errors.Is(err, runstate.ErrInvalidArgument) || !strings.HasPrefix(runstate.MessageOf(err), c.want) {
			t.Errorf("%q: %v, want ErrInvalidArgument saying %s", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the refusal shows the password: %v", c.in, err)
		}
	}
}

// A setting the scheme does not take is refused before anything opens.
func TestUnknownSettingsAreRefused(t *testing.T) {
	_, err := stores.Open(t.Context(), "memory", stores.Options{Settings: map[string]string{"nosync": "true"}})
	if !errors.Is(err, runstate.ErrInvalidArgument) {
		t.Fatalf("memory with nosync: %v", err)
	}
	s, err := stores.Open(t.Context(), "badger:"+t.TempDir(), stores.Options{Settings: map[string]string{"nosync": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Leases() == nil {
		t.Error("the Badger store has no leases")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A scheme registered twice is a program's mistake, as with database/sql.
func TestASchemeRegistersOnce(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering postgresql again did not panic")
		}
	}()
	stores.Register(stores.Scheme{Name: "postgresql", Open: func(context.Context, stores.Name, stores.Options) (*stores.Opened, error) {
		return nil, nil
	}})
}

// A program may open one scheme its own way, as the demo runner opens a
// Badger directory its processes share.
func TestOverrideOpensASchemeItsOwnWay(t *testing.T) {
	var got stores.Name
	_, err := stores.Open(t.Context(), "badger:/nowhere", stores.Options{Override: map[string]stores.OpenFunc{
		"badger": func(_ context.Context, name stores.Name, _ stores.Options) (*stores.Opened, error) {
			got = name
			return nil, errors.New("not opened")
		}}})
	if err == nil || got != (stores.Name{Scheme: "badger", Arg: "/nowhere"}) {
		t.Fatalf("override saw %+v, returned %v", got, err)
	}
}
