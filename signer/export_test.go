package signer

// SignDirectoryAs is signDirectory for the vector test: it signs the base
// of an already parsed signature, so a published vector's parameter order
// can be reproduced.
var SignDirectoryAs = signDirectory
