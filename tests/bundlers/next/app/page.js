import Fixture from "./fixture";

export default function Page() {
  return <Fixture />;
}
