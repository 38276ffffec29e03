module packlm/hosts/go

go 1.19

require packlm v0.0.0

replace packlm => ../../../bindings/go
