module github.com/kordproject/kord

go 1.26.0
