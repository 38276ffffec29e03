module packlm

go 1.19
