module github.com/runstate/runstate

go 1.24

require github.com/oklog/ulid/v2 v2.1.2 // indirect
