// Package layout holds no code: its test keeps the house layout honest (file
// and function sizes, and which packages internal/ may import).
package layout
