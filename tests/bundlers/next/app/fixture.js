"use client";
// A Next.js client component running the shared fixture page (../../app/main.js) in the
// browser only: the worker needs a browser, so nothing of ternflow runs during prerendering.
import { useEffect } from "react";

export default function Fixture() {
  useEffect(() => {
    import("../../app/main.js");
  }, []);
  return <p>ternflow fixture</p>;
}
